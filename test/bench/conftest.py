"""Fixtures of the benchmark tests: the policy tests' tiny configs and language model.

Reused from test/policy/conftest.py, not copied, so the policy benchmarks run on the
same tiny policy as the policy tests; single-threaded torch as there.
"""

from ..policy.conftest import (  # noqa: F401  (fixtures, found by name)
    language,
    language_cache_path,
    make_config,
    one_torch_thread,
)
