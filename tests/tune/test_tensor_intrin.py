"""tilus_tvm.tune.tensor_intrin: frames of frozen modules found in inspect's cache, only for the import."""
import importlib._bootstrap
import inspect
import sys

from tilus_tvm.tune import tensor_intrin


def _frozen_frame():
    """A frame whose code is importlib's (file ``<frozen importlib._bootstrap>``), caught mid-import."""
    caught = []

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "tilus_tvm_no_such_module":
                caught.append(sys._getframe(1))
            return None

    sys.meta_path.insert(0, Finder())
    try:
        try:
            __import__("tilus_tvm_no_such_module")
        except ImportError:
            pass
    finally:
        sys.meta_path.pop(0)
    return caught[0]


def test_frozen_modules_are_named_by_their_pseudo_files():
    frozen = tensor_intrin._frozen_modules()
    assert frozen["<frozen importlib._bootstrap>"] == "importlib._bootstrap"
    assert frozen["<frozen importlib._bootstrap_external>"] == "importlib._bootstrap_external"
    assert all(name in sys.modules for name in frozen.values())


def test_frozen_frames_are_known_inside_the_block_only():
    frame = _frozen_frame()
    assert frame.f_code.co_filename == "<frozen importlib._bootstrap>"
    before = dict(inspect.modulesbyfile)
    outside = inspect.getframeinfo(frame)
    with tensor_intrin.frozen_frames_known():
        assert inspect.modulesbyfile["<frozen importlib._bootstrap>"] == "importlib._bootstrap"
        assert inspect.getmodule(frame, frame.f_code.co_filename) is importlib._bootstrap
        inside = inspect.getframeinfo(frame)
    assert "<frozen importlib._bootstrap>" not in inspect.modulesbyfile
    assert set(before) <= set(inspect.modulesbyfile)
    # what TVMScript's inspect.stack() sees of such a frame does not change
    assert (inside.filename, inside.lineno, inside.function, inside.code_context) == (
        outside.filename, outside.lineno, outside.function, outside.code_context)
