"""The fixtures every test module shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import Receiver


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
