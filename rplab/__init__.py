"""The lab: the project's tooling, kept out of the runtime package (and so out of the wheel).

Offline OCI images, private containerd / dockerd / registry / CNI, the example plugin (the one fake plugin
server of tests, lab and bench), a synthetic backend, the lab command (`.venv/bin/python -m rplab`), conformance,
the cri-dockerd replay, a streaming client and differential helpers. Shared by the tests, `scripts/lab.sh`
and bench/. It runs from a checkout: the repository root must be on sys.path (it is, from the root, for
`.venv/bin/python -m ...` and pytest); the runtime package never imports it.
"""

from pathlib import Path

# The checkout the lab runs from: the cwd of the lab's own Python subprocesses (`python -m rplab.…`), so they
# import this package wherever their parent runs.
CHECKOUT = Path(__file__).resolve().parent.parent
