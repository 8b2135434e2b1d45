"""The tests' shared kits, one module per concept: imported as tests.kits.NAME by every test package."""
