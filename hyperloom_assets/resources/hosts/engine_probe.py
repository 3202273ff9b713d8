"""Which distribution of an engine an interpreter has, and whether it is the engine.

Standard library only: this file's text runs inside the serving interpreter
(`python -c <text> <json>`, which may lack this project) and is imported in-process too.
A distribution counts as the engine only when it ships the engine's own file: listed
in its RECORD, or (an editable install) found in the package its top-level name
resolves to, which `find_spec` locates without importing it.
"""

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path


def ships(distribution, relative):
    if any(str(path) == relative for path in (distribution.files or [])):
        return True
    top, _, rest = relative.partition("/")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    locations = (spec.submodule_search_locations or []) if spec else []
    return any((Path(location) / rest).is_file() for location in locations)


def probe(candidates):
    """The first of [(name, relative file), ...] installed, as a dict, or None."""
    for name, relative in candidates:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return {"distribution": name, "version": distribution.version, "genuine": ships(distribution, relative)}
    return None


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
