import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_finish(session):
    """What collection built (parametrised corpora, parsed modules, TensorFlow's and Keras's own
    objects once imported) lives for the whole run: freeze it, so that every full collection the
    tests trigger does not walk it all again."""
    import gc

    gc.collect()
    gc.freeze()
