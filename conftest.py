"""Root conftest: registers the shared test plugin for every test tree in the repository."""

pytest_plugins = ["backbone.testing.pytest_plugin"]
