"""Up to four attempts compared side by side: picked on the attempts list, named in the address,
what differs first; too many or unknown attempts are refused with a sentence in the page."""

from __future__ import annotations

import re

from httpx import AsyncClient

from app.casebook.compare import Row
from tests.support.launching import FINAL, REPLAY, launch, wait_for
from tests.support.web import log_in

HTML = {"Accept": "text/html"}


async def launch_four(api: AsyncClient) -> list[int]:
    ids = [
        await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0]),
        await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY),
        await launch(api, "qwen36-27b-mtp-fixed", "rtxpro-01", [2]),
        await launch(api, "llama31-8b", "b200-01", [0]),
    ]
    for attempt_id in ids:
        await wait_for(api, attempt_id, FINAL)
    return ids


async def test_three_and_four_attempts_side_by_side_with_the_changed_arguments_first(api: AsyncClient) -> None:
    oom, refused, fixed, llama = await launch_four(api)

    four = (await api.get("/api/compare", params={"ids": f"{oom},{refused},{fixed},{llama}"})).json()
    assert [side["id"] for side in four["sides"]] == [oom, refused, fixed, llama] and "a" not in four
    assert [side["failure_class"] for side in four["sides"]] == ["oom", "arg-conflict", "healthy", "healthy"]
    fraction = next(row for row in four["argv"] if row["name"] == "--mem-fraction-static")
    assert fraction["values"] == [None, "0.95", "0.95", None] and fraction["differs"]
    assert next(row for row in four["revision"] if row["name"] == "preset")["values"][3] == "llama31-8b"
    pair = (await api.get("/api/compare", params={"a": oom, "b": fixed})).json()  # the two-sided form stays
    assert pair["a"]["id"] == oom and pair["sides"][1]["id"] == fixed
    assert next(row for row in pair["argv"] if row["name"] == "--mem-fraction-static")["b"] == "0.95"

    await log_in(api)
    page = (await api.get("/compare", params={"ids": f"{oom},{refused},{fixed}"})).text
    assert re.search(rf'<h1>Attempt <a href="/attempts/{oom}">#{oom}</a>, <a href="/attempts/{refused}">#{refused}</a> '
                     rf'and <a href="/attempts/{fixed}">#{fixed}</a></h1>', page)  # fmt: skip
    header = f"<thead><tr><th></th><th>#{oom}</th><th>#{refused}</th><th>#{fixed}</th></tr></thead>"
    assert header in page
    row = re.search(r'<tr class="differs" data-row="--mem-fraction-static">(.*?)</tr>', page)
    assert row and re.findall(r"<td>(.*?)</td>", row.group(1)) == [
        "<code>--mem-fraction-static</code>",
        "—",
        "0.95",
        "0.95",
    ]
    changed, outcome = page.index('data-row="--mem-fraction-static"'), page.index('id="outcome"')
    same = page.index('<details class="same-rows"><summary>', page.index('id="argv-diff"'))
    assert changed < same < page.index('data-row="--speculative-algorithm"') < outcome  # what differs first
    assert "the same on every side</summary>" in page
    assert page.count('<table class="list timeline">') == 3 and page.count('class="ln error mark"') == 2
    assert f'href="/compare?ids={fixed},{refused},{oom}">reverse the order</a>' in page
    # The attempts list's checkboxes send the ids one by one: the same comparison.
    picked = await api.get(f"/compare?ids={oom}&ids={refused}&ids={fixed}")
    assert picked.status_code == 200 and header in picked.text
    old = (await api.get("/compare", params={"a": oom, "b": fixed})).text  # links elsewhere use a and b
    assert f"<th>#{oom}</th><th>#{fixed}</th>" in old and ">swap sides</a>" in old


async def test_the_attempts_list_picks_attempts_for_a_comparison(api: AsyncClient) -> None:
    first = await launch(api, "llama31-8b", "b200-01", [1])
    await wait_for(api, first, FINAL)
    await log_in(api)
    page = (await api.get("/attempts")).text
    assert '<form method="get" action="/compare" id="compare-form"' in page
    assert (f'<input type="checkbox" name="ids" value="{first}" form="compare-form" id="pick-{first}" hx-preserve'
            in page)  # fmt: skip
    fragment = (await api.get("/attempts", headers={"HX-Request": "true"})).text  # the list's refresh keeps ticks
    assert f'id="pick-{first}" hx-preserve' in fragment


async def test_too_many_unknown_or_malformed_attempts_are_refused_with_a_sentence(api: AsyncClient) -> None:
    first = await launch(api, "llama31-8b", "b200-01", [2])
    await wait_for(api, first, FINAL)
    await log_in(api)
    refusals = [
        ({"ids": "1,2,3,4,5"}, 422, "compare takes 2 to 4 attempts, not 5"),
        ({"ids": str(first)}, 422, "compare takes 2 to 4 attempts, not 1"),
        ({"ids": f"{first},999999"}, 404, "no attempt 999999"),
        ({"ids": f"{first},x"}, 422, "ids: &#39;x&#39; is not an attempt number"),
        ({"ids": f"{first},{2**63}"}, 422, "is not an attempt number"),
        ({}, 422, "name the attempts to compare: ids=1,2,3 (2 to 4 of them), or a and b"),
    ]
    for params, status, sentence in refusals:
        answer = await api.get("/compare", params=params, headers=HTML)
        assert answer.status_code == status, (params, answer.text)
        assert sentence in answer.text and 'class="topbar"' in answer.text, params  # in the normal page
    answer = await api.get("/api/compare", params={"ids": "1,2,3,4,5"})
    assert answer.status_code == 422 and answer.json()["detail"] == "compare takes 2 to 4 attempts, not 5"


def test_a_side_without_a_benchmark_is_not_a_different_workload() -> None:
    """Compare said "benchmarked with different workloads" when one side had no benchmark at all."""
    assert not Row("workload", ("tiny", None)).differs_where_given
    assert not Row("workload", ("tiny", "tiny", None)).differs_where_given
    assert Row("workload", ("tiny", "chat-short", None)).differs_where_given
