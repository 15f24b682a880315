"""`./manage.py` as the README writes it: the README runs its commands as `./manage.py`, not
`python manage.py`. What `./manage.py` does when run that way is tested in
tests/system/deploy/test_manage.py."""

from __future__ import annotations

from tests.conftest import ROOT


def test_the_readme_runs_commands_as_dot_slash_manage_py():
    readme = (ROOT / "README.md").read_text().replace("`.venv/bin/python manage.py …`", "")  # the alternative

    assert "python manage.py" not in readme
    assert readme.count("./manage.py jobs ") >= 10
