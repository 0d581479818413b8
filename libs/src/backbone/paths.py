"""Where the repository's shared, non-Python artefacts live (the schemas directory).

Services deployed from an image set ``SCHEMAS_DIR``; in a checkout the directory is found by
walking up from this file. A missing directory is a configuration error that names the variable.
"""

from __future__ import annotations

from pathlib import Path

from backbone.settings import SchemasSettings, SettingsError, load_settings


def schemas_dir() -> Path:
    """The directory holding ``envelope.avsc``, ``events/``, ``commands/`` and ``topics.toml``."""
    configured = load_settings(SchemasSettings).schemas_dir  # SettingsError names a wrong SCHEMAS_DIR
    if configured is not None:
        return configured
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "schemas"
        if (candidate / "topics.toml").is_file():
            return candidate
    raise SettingsError(["SCHEMAS_DIR is required: no schemas/ directory found above the backbone package"])
