"""Names that become folders, branches, tags and queues: one pattern for targets and hosts. Pure code.

A target's name (its file's stem) is a folder under the state folder (`trees/<name>`,
`runs/<name>`), a git branch and a Dagster partition; a host's name is a tag value, a
Celery queue and a folder. So a name is a single path segment that cannot be `.` or
`..`, cannot start with `-` (an option to git or ssh) or `.` (the project's own hidden
files sit beside the names), and holds nothing a shell, a ref or a URL reads specially.
"""

from __future__ import annotations

import re

SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
SAFE_NAME_RULE = "letters, digits, '-' or '_', starting with a letter or digit, at most 63 characters"
_SAFE_NAME = re.compile(SAFE_NAME_PATTERN)


def is_safe_name(name: str) -> bool:
    # fullmatch: `$` alone would let a trailing newline through.
    return isinstance(name, str) and _SAFE_NAME.fullmatch(name) is not None
