"""The tooling's command lines (rplab's and bench's) say a usage mistake in one line naming --help, exit code 2, as runtimeproxyctl
does (runtimeproxy.usage), not argparse's usage dump of up to eight lines."""

from __future__ import annotations

import importlib
import inspect

import pytest

TOOLS = ["rplab", "rplab.runtimes", "rplab.example_plugin", "rplab.tested_with", "rplab.consumer_modules",
         "rplab.peers", "rplab.kubelet", "rplab.guest", "rplab.release", "rplab.roots", "rplab.nri_plugin",
         "rplab.synthetic", "rplab.koord_proxy", "rplab.kubelet_pods", "bench.run", "bench.aio_relay",
         "bench.binary_figures"]


@pytest.mark.parametrize("name", TOOLS)
def test_an_unknown_flag_is_one_line_naming_help(name: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"{name}.__main__" if name == "rplab" else name)
    argv = ["--no-such-flag"]
    monkeypatch.setattr("sys.argv", [name, *argv])  # for the mains that read sys.argv themselves
    entry = module.parse_args if name == "bench.run" else module.main
    with pytest.raises(SystemExit) as exited:
        entry(argv) if inspect.signature(entry).parameters else entry()
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.count("\n") == 1 and ": error: " in err and err.endswith(" (see --help)\n"), err
