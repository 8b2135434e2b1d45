"""setuptools reads setup.cfg; this adds the wire protocols' .proto files to the package.

Plugin authors need the hook protocol's .proto (and operators the admin API's): the wheel carries every file of
protos/ under runtimeproxy/protos/, beside the generated modules in runtimeproxy/pb/.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PROTOS_DIR = Path(__file__).resolve().parent / "protos"


class BuildPyWithProtos(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "runtimeproxy" / "protos"
        for proto in sorted(PROTOS_DIR.rglob("*.proto")):
            destination = target / proto.relative_to(PROTOS_DIR)
            self.mkpath(str(destination.parent))
            self.copy_file(str(proto), str(destination))


setup(cmdclass={"build_py": BuildPyWithProtos})
