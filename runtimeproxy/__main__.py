"""`python -m runtimeproxy` is the same as the `koord-runtime-proxy` command."""

from runtimeproxy.cli import main

raise SystemExit(main())
