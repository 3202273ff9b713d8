"""Put on a server's PYTHONPATH by the launcher when it serves an engine from a source tree.

Python imports `sitecustomize` at startup; this one adds a finder that, the first time
the engine's package (HYPERLOOM_ENGINE_PACKAGE) is imported, writes the file it came
from to stderr: the server's own account of which code it runs, read back from its log
by resources/hosts/engine_origin.py. Standard library only, and it imports nothing
early: the package is found by the finders after this one, exactly as it would be.
"""

import importlib.util
import os
import sys

_PACKAGE = os.environ.get("HYPERLOOM_ENGINE_PACKAGE")


class _EngineOriginReporter:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != _PACKAGE:
            return None
        sys.meta_path.remove(cls)
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        print(f"hyperloom-engine-origin: {name} {origin} pid={os.getpid()}", file=sys.stderr, flush=True)
        return spec


if _PACKAGE:
    sys.meta_path.insert(0, _EngineOriginReporter)
