"""Where the proxy lives on a node: its install directory and its two commands' names.

One place for what the release bundle (rplab.release) is built for and what the node packages
(rplab.nodepackages) install, and what the tests of both check.
"""

INSTALL_DIR = "/opt/koord-runtime-proxy"
PROXY, CTL = "koord-runtime-proxy", "runtimeproxyctl"
