"""The hosts file: what users write, and the errors they get when it is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.ssh import HostSpec, parse_hosts, render_hosts
from app.ssh.hosts import SlurmSettings


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
        ('[[host]]\nname = "a"\nkind = "k8s"\n', "host 'a': kind 'k8s' is not one of ssh, slurm"),
        ('[[host]]\nname = "a"\npartition = "gpu"\n', "host 'a': partition only apply to kind = \"slurm\""),
        ('[[host]]\nname = "a"\nkind = "slurm"\ngpus_per_node = 0\n', "gpus_per_node must be at least 1"),
        ('[[host]]\nname = "a"\nkind = "slurm"\ngpus_per_node = "8"\n', "host #1: gpus_per_node must be an integer"),
        ('[[host]]\nname = "a"\nkind = "slurm"\ntime_limit = "2 hours"\n', "is not a Slurm time limit"),
        ('[[host]]\nname = "a"\nkind = "slurm"\npartition = "gpu; rm"\n', "partition 'gpu; rm' is not a partition"),
        ('[[host]]\nname = "a"\nkind = "slurm"\nsbatch_options = "--qos=x"\n', "sbatch_options must be a list"),
        ('[[host]]\nname = "a"\nkind = "slurm"\nsbatch_options = ["-q x"]\n', "a list of long options"),
        ('[[host]]\nname = "a"\nkind = "slurm"\noutput_dir = "../x"\n', "must not contain '..'"),
    ],
)
def test_mistakes_are_reported_with_host_and_field(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        parse_hosts(text)
    assert message in str(error.value)


def test_slurm_cluster_entry_reads_its_settings() -> None:
    text = (
        '[[host]]\nname = "cluster"\nkind = "slurm"\naddress = "login1"\npartition = "h200"\naccount = "ml"\n'
        'time_limit = "1-02:00:00"\ngpus_per_node = 8\nsbatch_options = ["--qos=high", "--exclusive"]\n'
        'output_dir = "/shared/launchdeck"\n'
    )
    [spec] = parse_hosts(text)
    assert spec.kind == "slurm"
    assert spec.slurm == SlurmSettings(
        partition="h200",
        account="ml",
        time_limit="1-02:00:00",
        gpus_per_node=8,
        sbatch_options=("--qos=high", "--exclusive"),
        output_dir="/shared/launchdeck",
    )
    assert parse_hosts(render_hosts([spec])) == [spec]


def test_plain_host_is_of_kind_ssh() -> None:
    [spec] = parse_hosts('[[host]]\nname = "box"\nkind = "ssh"\n')
    assert spec.kind == "ssh" and spec.slurm is None


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,19}", fullmatch=True)
labels = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)  # controls too


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
            slurm=st.none()
            | st.builds(
                SlurmSettings,
                partition=st.none() | names,
                account=st.none() | names,
                time_limit=st.none() | st.from_regex(r"\d{1,3}(:\d\d){0,2}", fullmatch=True),
                gpus_per_node=st.none() | st.integers(1, 16),
                sbatch_options=st.lists(
                    st.from_regex(r"--[a-z]{1,8}(=[a-z0-9]{1,4})?", fullmatch=True), max_size=2
                ).map(tuple),
                output_dir=st.from_regex(r"(/?[a-z0-9_-]{1,8}){1,3}", fullmatch=True),
            ),
        ),
        max_size=4,
        unique_by=lambda spec: spec.name,
    )
)
def test_rendered_hosts_file_reads_back_the_same(specs: list[HostSpec]) -> None:
    assert parse_hosts(render_hosts(specs)) == specs
