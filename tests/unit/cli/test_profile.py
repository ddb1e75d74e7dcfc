"""The profile file is read into a typed Profile, and a bad value is refused by its name: a typo
in the file must not quietly send a command to another Host or as another token."""

import tomllib
from pathlib import Path

import pytest

from sumi.cli._errors import USAGE, CliError
from sumi.cli._profile import Context, Profile, parse

GOOD = """
current-context = "local"
[contexts.local]
url = "http://127.0.0.1:8080"
token-file = "/somewhere/admin-token"
space = "demo"
[contexts.ci]
token = "sumi_x"
"""


def test_a_profile_is_read_into_its_contexts() -> None:
    # QC-15 (authority): the token a command carries comes from the context the profile names
    profile = parse(tomllib.loads(GOOD), "config.toml")
    assert profile == Profile(
        "local",
        {
            "local": Context(url="http://127.0.0.1:8080", token_file="/somewhere/admin-token", space="demo"),
            "ci": Context(token="sumi_x"),
        },
    )
    assert parse({}, "config.toml") == Profile()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("current-context = 3\n", "current-context"),
        ('contexts = "local"\n', "contexts"),
        ('[contexts]\nlocal = "x"\n', "contexts.local"),
        ("[contexts.local]\nurl = 8080\n", "contexts.local.url"),
        ('[contexts.local]\ntokenfile = "t"\n', "'tokenfile'"),
        ('curent-context = "local"\n', "'curent-context'"),
    ],
)
def test_a_bad_value_is_refused_by_its_name(text: str, named: str) -> None:
    # QC-15 (authority): never a command sent with a token or URL the profile did not say
    with pytest.raises(CliError) as refused:
        parse(tomllib.loads(text), Path("config.toml"))
    assert named in str(refused.value) and "config.toml" in str(refused.value)
    assert refused.value.code == USAGE
