import pytest


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One artifact cache for the whole session: exports are slow, and sharing them is the product's job."""
    return tmp_path_factory.mktemp("artifact-cache")
