"""A release venv's .pth puts the project on the path (resources/releases/envs.py): REPO_ROOT must be
the repository that holds the package, wherever the package's folders sit inside it."""
from hyperloom_assets.resources.releases import envs


def test_the_release_env_points_at_the_repository_that_holds_the_package() -> None:
    assert (envs.REPO_ROOT / "hyperloom_assets" / "__init__.py").is_file()
    assert (envs.REPO_ROOT / "pyproject.toml").is_file()
