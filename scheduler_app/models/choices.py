"""The base of the models' choices (RunState, TargetKind, ...): Django's TextChoices, which the
type checker sees as what it is, an enum.StrEnum with a label and the class's choices. (Django
ships no type information: to mypy without this, a member such as RunState.QUEUED would be a
plain str with no .value.) At run time this is django.db.models.TextChoices itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import enum
    from typing import ClassVar

    class TextChoices(enum.StrEnum):
        choices: ClassVar[list[tuple[str, str]]]
        labels: ClassVar[list[str]]
        values: ClassVar[list[str]]
        names: ClassVar[list[str]]

        @property
        def label(self) -> str: ...

else:
    from django.db.models import TextChoices

__all__ = ["TextChoices"]
