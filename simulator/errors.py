"""The one exception type for errors a user can cause (bad input, impossible layout)."""
from __future__ import annotations


class RlsimError(ValueError):
    """A user-caused error. The message names the file, the field and the fix.

    The CLI prints it without a traceback and exits 2.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None,
                 fix: str | None = None) -> None:
        self.source = source
        self.field = field
        self.fix = fix
        parts = []
        if source:
            parts.append(str(source))
        if field:
            parts.append(f"field '{field}'")
        head = ": ".join(parts)
        text = f"{head}: {message}" if head else message
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)
