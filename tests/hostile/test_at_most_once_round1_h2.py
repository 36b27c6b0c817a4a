"""The at-most-once table's h2c cases (tests/hostile/test_at_most_once_round1.py
holds the servers, the front ends and the HTTP/1.1 cases): a file of their own,
so that xdist runs the two protocols side by side."""

from __future__ import annotations

from typing import Any

import pytest
from tests.hostile.test_at_most_once_round1 import Case, check_post_at_most_once, post_params


@pytest.mark.parametrize(("case", "front"), post_params("h2"))
def test_post_is_sent_at_most_once_over_h2c(case: Case, front: str, tmp_path: Any) -> None:
    check_post_at_most_once(case, front, tmp_path)
