"""The adjustment table (nri.table) against the code and the docs: every ContainerAdjustment field has its row,
a row says "refused" for a runtime exactly when nri.adjust refuses its fields with that frontend's
ContainerEdits.carries, and docs/nri.md shows the table as generated."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor

from runtimeproxy.cri.edits import CARRIED_WITH_PROFILES as CRI_CARRIED
from runtimeproxy.docker.edits import CARRIED as DOCKER_CARRIED
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.nri.adjust import applied_at_creation
from runtimeproxy.nri.table import ROWS, markdown
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

DOCS = Path(__file__).parents[2] / "docs" / "nri.md"
CARRIED = {"cri": CRI_CARRIED, "docker": DOCKER_CARRIED}
# Messages whose fields are adjusted one by one (the others are set as a whole).
DESCENDED = frozenset({"linux", "linux.resources", "linux.resources.cpu", "linux.resources.memory"})


def adjustment_fields(descriptor: Descriptor = nri.ContainerAdjustment.DESCRIPTOR, prefix: str = "") -> list[str]:
    """Every field a plugin can set, as nri.adjust names it."""
    paths = []
    for field in descriptor.fields:
        path = prefix + field.name
        if path in DESCENDED:
            paths += adjustment_fields(field.message_type, path + ".")
        else:
            paths.append(path)
    return paths


def test_every_adjustment_field_has_one_row() -> None:
    named = [path for row in ROWS for path in row.fields]
    assert sorted(named) == sorted(adjustment_fields())


@pytest.mark.parametrize("runtime", ["cri", "docker"])
def test_a_row_says_refused_exactly_when_the_code_refuses_its_fields(runtime: str) -> None:
    applied = applied_at_creation(ContainerEdits(carries=CARRIED[runtime]))
    for row in ROWS:
        if row.fields:
            carried = [path in applied for path in row.fields]
            assert carried == [not row.refused(runtime)] * len(carried), (runtime, row.label)


def test_the_docs_show_the_table() -> None:
    assert markdown() in DOCS.read_text()
