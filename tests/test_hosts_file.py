"""The hosts file: what users write, and the errors they get when it is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.ssh import HostSpec, parse_hosts, render_hosts


def test_minimal_host_leaves_the_rest_to_ssh_config() -> None:
    [spec] = parse_hosts('[[host]]\nname = "gpu-box"\n')
    assert spec == HostSpec(name="gpu-box")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[host]]\naddress = "x"\n', "host #1: name is required"),
        ('[[host]]\nname = "a"\nport = 70000\n', "host 'a': port 70000 is out of range 1-65535"),
        ('[[host]]\nname = "a"\nprot = 22\n', "host #1: unknown field(s) prot"),
        ('[[host]]\nname = "a"\nlabels = "b200"\n', "host #1: labels must be a list"),
        ('[[host]]\nname = "a"\ntrust_on_first_use = "yes"\n', "trust_on_first_use must be true or false"),
        ('[[host]]\nname = "a"\n[[host]]\nname = "a"\n', "host 'a': the name is used twice"),
        ('[[hosts]]\nname = "a"\n', "unknown section(s) hosts"),
        ("[[host]\n", "hosts file: "),
        ('[[host]]\nname = "a b"\n', "host #1: name 'a b' is not letters, digits"),
        ('[[host]]\nname = "a"\naddress = "x\\ny"\n', "host #1: address 'x\\ny' is not a host name or IP address"),
    ],
)
def test_mistakes_are_reported_with_host_and_field(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        parse_hosts(text)
    assert message in str(error.value)


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,19}", fullmatch=True)
labels = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=20)


@given(
    st.lists(
        st.builds(
            HostSpec,
            name=names,
            address=st.none() | names,
            port=st.none() | st.integers(1, 65535),
            user=st.none() | names,
            labels=st.lists(labels, max_size=3).map(tuple),
            identity_files=st.lists(st.from_regex(r"(/[a-z0-9_-]{1,8}){1,3}", fullmatch=True), max_size=2).map(tuple),
            trust_on_first_use=st.booleans(),
            max_sessions=st.integers(1, 64),
        ),
        max_size=4,
        unique_by=lambda spec: spec.name,
    )
)
def test_rendered_hosts_file_reads_back_the_same(specs: list[HostSpec]) -> None:
    assert parse_hosts(render_hosts(specs)) == specs
