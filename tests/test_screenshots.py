"""The docs' pictures and the script that takes them (`make screenshots`) cannot drift apart:
every picture the README and the pages in docs/ show is one the script takes, and none lies in
docs/screenshots unshown. (The script itself runs a demo for minutes; `make screenshots` runs it,
and it checks its pages.)"""

from __future__ import annotations

import re

from tests.support.paths import README, ROOT

DOCS = ROOT / "docs"
SHOTS = DOCS / "screenshots"
SCRIPT = DOCS / "screenshots.py"


def test_the_docs_show_every_screenshot_the_script_takes_and_no_other() -> None:
    shown = set(re.findall(r"docs/screenshots/([\w-]+\.png)", README.read_text()))
    for page in DOCS.glob("*.md"):  # a page in docs/ names its pictures from beside them
        shown |= set(re.findall(r"\(screenshots/([\w-]+\.png)\)", page.read_text()))
    taken = set(re.findall(r'"([\w-]+\.png)"', SCRIPT.read_text()))
    stored = {path.name for path in SHOTS.glob("*.png")}
    assert shown == taken == stored, {"shown only": shown - taken, "taken only": taken - shown, "stored": stored}
