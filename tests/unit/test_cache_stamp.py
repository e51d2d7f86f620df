"""darknumba's kernels stamped in numba's cache with every module they may call
(kernels/cache_stamp.py): a change to a helper in another module (an inlined epilogue, say)
makes the cached kernels stale, where numba's own stamp (the kernel's file alone) kept
loading the old code."""
import numpy as np
import pytest

from darknumba.kernels import cache_stamp
from darknumba.kernels.cache_stamp import hash_sources, sources_stamp, stamp_dependencies


def test_the_hash_follows_the_modules_that_use_numba(tmp_path):
    (tmp_path / "k").mkdir()
    kernel, helper, plain = (tmp_path / "k" / "a.py", tmp_path / "b.py", tmp_path / "c.py")
    kernel.write_text("from numba import njit\n")
    helper.write_text("import numba  # helper\n")
    plain.write_text("x = 1\n")
    first = hash_sources(tmp_path)
    plain.write_text("x = 2\n")
    assert hash_sources(tmp_path) == first           # no numba in it: not part of the stamp
    helper.write_text("import numba  # helper, changed\n")
    assert hash_sources(tmp_path) != first


def test_a_darknumba_kernel_is_stale_when_a_module_it_may_call_changes():
    assert cache_stamp.install()
    from darknumba.kernels.fused import bn_divisors
    out = np.zeros(2, np.float32)
    bn_divisors(np.array([4, 9], np.float32), False, out)      # loaded or compiled and saved
    np.testing.assert_allclose(out, [2, 3], rtol=1e-6)
    f = bn_divisors._cache._cache_file
    own, deps = f._source_stamp
    assert deps == sources_stamp()
    if not f._load_index():
        pytest.skip("numba could not write its cache here")
    f._source_stamp = (own, "another version of the helpers")
    try:
        assert f._load_index() == {}                 # stale: numba compiles it again
    finally:
        f._source_stamp = (own, deps)
    assert f._load_index()


def test_other_kernels_keep_numbas_stamp():
    class Box:
        pass
    cache, f = Box(), Box()
    cache._cache_file, f._source_stamp = f, "numba's"
    cache._py_func = test_other_kernels_keep_numbas_stamp       # a function of this module
    stamp_dependencies(cache)
    assert f._source_stamp == "numba's"
