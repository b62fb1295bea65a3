"""harness.markdown: the shared snippets of the run report, the history and the gate."""

from __future__ import annotations

from harness import markdown


def test_commits_name_one_commit_alone_and_several_with_their_points() -> None:
    one = {"6350b9bdd7d55d7da971da25758ff12a953863ba": 63}
    assert markdown.commits(one) == "6350b9bdd7d5"
    two = {"6350b9bdd7d55d7da971da25758ff12a953863ba": 62, "3223a0202438534": 1}
    assert markdown.commits(two) == "6350b9bdd7d5 (62 points), 3223a0202438 (1)"
    assert (
        markdown.commits({}) == ""
        and markdown.commits({"": 4, "abc": 1}) == "? (4 points), abc (1)"
    )


def test_table_escapes_pipes_and_newlines() -> None:
    assert markdown.table(("a", "b"), [("x|y", "1\n2")]) == "| a | b |\n|---|---|\n| x\\|y | 1 2 |"
