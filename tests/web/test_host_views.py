"""The hosts views: the compact one (a row per host, a bar per GPU) and the filter by label and
free memory, as a pure function over readings and as the pages show it."""

from __future__ import annotations

import re

from httpx import AsyncClient

from app.gpu.overview import HostFilter, filter_hosts
from tests.support.hosts import generated_hosts
from tests.support.web import log_in


def test_filter_keeps_hosts_with_enough_gpus_of_the_free_memory_asked() -> None:
    hosts = generated_hosts(18)
    two_free = filter_hosts(hosts, HostFilter(gpus=2, free_gib=80))
    # host i has 8 - i % 9 GPUs of ~178 GiB free: 2 or more unless 7 or 8 are busy
    assert [h.name for h in two_free] == [h.name for i, h in enumerate(hosts) if i % 9 <= 6]
    assert filter_hosts(hosts, HostFilter(gpus=8, free_gib=170)) == [hosts[0], hosts[9]]
    rack_b = filter_hosts(hosts, HostFilter(label="rack-b", gpus=1, free_gib=80))
    assert [h.name for h in rack_b] == [f"b200-{i:02d}" for i in range(1, 18, 2) if i % 9 != 8]
    assert filter_hosts(hosts, HostFilter(free_gib=1000)) == []  # no GPU that large
    assert filter_hosts(hosts, HostFilter()) == hosts
    assert filter_hosts(hosts, HostFilter(label="rtx-pro-6000")) == []


async def test_compact_view_has_a_row_per_host_and_a_labelled_meter_per_gpu(app_client: AsyncClient) -> None:
    await log_in(app_client)
    html = (await app_client.get("/hosts", params={"view": "compact"})).text
    assert html.count('class="chost"') == 3 and 'class="gpu"' not in html  # no cards
    meters = re.findall(r'<span class="cgpu[^"]*" data-gpu="\d+" role="meter"[^>]*aria-label="([^"]+)"', html)
    assert len(meters) == 16
    assert re.fullmatch(r"GPU 0: \d+\.\d of \d+\.\d GiB used, \d+\.\d GiB free, \d+ % load", meters[0]), meters[0]
    assert 'role="img" aria-label="online"' in html  # the state in words as well as colour
    assert 'sse-connect="/hosts/events?view=compact"' in html  # the live updates keep the view
    assert '<a href="/hosts">Cards</a><a href="/hosts?view=compact" aria-current="true">Compact</a>' in html


async def test_host_filter_in_the_query_string_narrows_both_views(app_client: AsyncClient) -> None:
    await log_in(app_client)
    # rtxpro-01 and rtxpro-02 have 4 GPUs of ~95 GiB each, b200-01 8 of ~179 GiB
    page = await app_client.get("/hosts", params={"view": "compact", "gpus": "2", "free_gib": "100"})
    assert re.findall(r'<li class="chost" data-host="([^"]+)"', page.text) == ["b200-01"]
    assert "1 of 3 hosts with 2 GPUs of ≥ 100 GiB free." in page.text
    assert 'sse-connect="/hosts/events?view=compact&amp;gpus=2&amp;free_gib=100.0"' in page.text
    assert page.text.count('class="cgpu fits"') == 8
    cards = (await app_client.get("/hosts", params={"label": "rtx-pro-6000", "gpus": "", "free_gib": ""})).text
    assert re.findall(r'<article class="host" data-host="([^"]+)"', cards) == ["rtxpro-01", "rtxpro-02"]
    assert "2 of 3 hosts labelled rtx-pro-6000." in cards
    five = (await app_client.get("/hosts", params={"gpus": "5", "free_gib": "80"})).text
    assert re.findall(r'data-host="([^"]+)"', five) == ["b200-01"]  # the RTX PRO hosts have only 4


async def test_host_filter_refuses_nonsense_with_a_sentence(app_client: AsyncClient) -> None:
    await log_in(app_client)
    said = {
        "gpus": "gpus: Input should be greater than or equal to 0",
        "free_gib": "free_gib: Input should be a valid number",
        "view": "view: Input should be &#39;cards&#39; or &#39;compact&#39;",
    }
    for name, value in (("gpus", "-1"), ("free_gib", "lots"), ("view", "table")):
        answer = await app_client.get("/hosts", params={name: value}, headers={"Accept": "text/html"})
        assert answer.status_code == 422, name
        assert said[name] in answer.text and 'class="topbar"' in answer.text  # a sentence, in the page
