"""The README's pictures and the script that takes them (`make screenshots`) cannot drift apart:
every picture the README shows is one the script takes, and none lies in docs/screenshots unshown.
(The script itself runs a demo for minutes; `make screenshots` runs it, and it checks its pages.)"""

from __future__ import annotations

import re

from tests.support.paths import README, ROOT

SHOTS = ROOT / "docs" / "screenshots"
SCRIPT = ROOT / "docs" / "screenshots.py"


def test_the_readme_shows_every_screenshot_the_script_takes_and_no_other() -> None:
    shown = set(re.findall(r"docs/screenshots/([\w-]+\.png)", README.read_text()))
    taken = set(re.findall(r'"([\w-]+\.png)"', SCRIPT.read_text()))
    stored = {path.name for path in SHOTS.glob("*.png")}
    assert shown == taken == stored, {"shown only": shown - taken, "taken only": taken - shown, "stored": stored}
