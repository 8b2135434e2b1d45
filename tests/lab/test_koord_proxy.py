"""rplab.koord_proxy: koord-runtime-proxy runs in a private mount namespace, its plugin directory the test's own."""

from __future__ import annotations

from pathlib import Path

from rplab.koord_proxy import HOOK_DIR, KoordProxyProcess


def test_it_runs_in_a_private_mount_namespace_with_the_tests_hook_directory_bound_onto_its_own(tmp_path: Path) -> None:
    proxy = KoordProxyProcess(tmp_path / "koord.sock", "/run/ctd.sock", binary=Path("/bin/koord-runtime-proxy"))
    argv = proxy.argv
    assert argv[:5] == ["unshare", "-m", "--propagation", "private", "sh"]
    script = argv[6]
    assert "mount -t overlay" in script and "lowerdir=/etc" in script and f'mount --bind "$3" {HOOK_DIR}' in script
    assert argv[8:11] == [str(tmp_path / "etc-overlay" / "upper"), str(tmp_path / "etc-overlay" / "work"),
                          str(tmp_path / "hookserver.d")]
    assert argv[11:] == ["/bin/koord-runtime-proxy", f"--koord-runtimeproxy-endpoint={tmp_path / 'koord.sock'}",
                         "--remote-runtime-service-endpoint=/run/ctd.sock"]
    assert proxy.registered_line("10-a.json") == f"update config for {HOOK_DIR}/10-a.json "
