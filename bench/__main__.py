"""`.venv/bin/python -m bench`: the benchmark (bench/run.py)."""

from bench.run import main

raise SystemExit(main())
