"""Where the repository's shared, non-Python artefacts live (the schemas directory).

Services deployed from an image set ``SCHEMAS_DIR``; in a checkout the directory is found by
walking up from this file. A missing directory is a configuration error that names the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

from backbone.settings import SettingsError


def schemas_dir() -> Path:
    """The directory holding ``envelope.avsc``, ``events/``, ``commands/`` and ``topics.toml``."""
    configured = os.environ.get("SCHEMAS_DIR")
    if configured:
        path = Path(configured)
        if not (path / "topics.toml").is_file():
            raise SettingsError([f"SCHEMAS_DIR={configured!r} is invalid: no topics.toml there"])
        return path
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "schemas"
        if (candidate / "topics.toml").is_file():
            return candidate
    raise SettingsError(["SCHEMAS_DIR is required: no schemas/ directory found above the backbone package"])
