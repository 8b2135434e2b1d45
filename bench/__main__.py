"""`python3 -m bench`: the benchmark (bench/run.py)."""

from bench.run import main

raise SystemExit(main())
