"""tilus_tvm/utils/cache.py: clear_cache empties the cache directory the cache_dir option names."""
import pytest

from tilus_tvm import option
from tilus_tvm.errors import TilusError
from tilus_tvm.utils import clear_cache


@pytest.fixture(autouse=True)
def cache_in(tmp_path):
    option.cache_dir(tmp_path / "cache")
    yield tmp_path / "cache"
    option.set_option("cache_dir", None)


def populate(root):
    (root / "abc" / "sub").mkdir(parents=True)
    (root / "abc" / "kernel.so").write_text("x")
    (root / "ir" / "k").mkdir(parents=True)
    (root / "ir" / "k" / "00_transpile.txt").write_text("y")
    (root / ".memo").mkdir()
    (root / "top.json").write_text("{}")


def test_clear_everything(cache_in):
    populate(cache_in)
    assert clear_cache() == cache_in.resolve()
    assert list(cache_in.iterdir()) == []


def test_clear_one_subdirectory(cache_in):
    populate(cache_in)
    assert clear_cache("ir") == (cache_in / "ir").resolve()
    assert list((cache_in / "ir").iterdir()) == []
    assert (cache_in / "abc" / "kernel.so").read_text() == "x"


def test_a_missing_directory_is_created_empty(cache_in):
    assert clear_cache("nothing", "here").is_dir()


@pytest.mark.parametrize("item", ["..", "/etc", "", "a/../../b", 3])
def test_items_outside_the_cache_are_refused(item):
    with pytest.raises(TilusError, match="clear_cache: each item must be a relative path component"):
        clear_cache(item)
