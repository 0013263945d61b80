"""The manual's reference pages are what the code declares (regenerate them with
``python -m diffusion_policy_ros.reference``)."""

import pytest

from diffusion_policy_ros.reference import REFERENCE_DIR, pages


@pytest.mark.parametrize("name", sorted(pages()))
def test_reference_page_is_up_to_date(name):
    committed = (REFERENCE_DIR / name).read_text()
    assert committed == pages()[name], (
        f"docs/reference/{name} is out of date: run python -m diffusion_policy_ros.reference")
