"""What reading a corpus folder did (``ReadTally``): files read, pages, characters, files skipped and why,
repairs by kind."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ReadTally:
    """The counts of reading one folder, kept on its ``Corpus`` and printed by ``composer index --report``."""

    source: str
    files_read: int = 0
    from_cache: int = 0
    pages: int = 0
    characters: int = 0
    formats: Counter[str] = field(default_factory=Counter)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    """(document id, reason, message) per skipped file, in path order."""
    repairs: Counter[str] = field(default_factory=Counter)

    def skip_counts(self) -> Counter[str]:
        return Counter(reason for _, reason, _ in self.skipped)

    def lines(self) -> list[str]:
        """The tally as a user reads it: a summary line, then one line per kind of thing."""
        formats = ", ".join(f"{n} {ext}" for ext, n in sorted(self.formats.items()))
        out = [
            f"read {self.files_read} file(s) ({formats or 'none'}; {self.from_cache} from cache): "
            f"{self.pages} page(s), {self.characters} characters; {len(self.skipped)} skipped"
        ]
        if self.skipped:
            counts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skip_counts().items()))
            out.append(f"skipped {len(self.skipped)} file(s): {counts}")
            out += [f"  {doc_id}: {message}" for doc_id, _, message in self.skipped]
        repairs = ", ".join(f"{kind} {n}" for kind, n in sorted(self.repairs.items()) if n)
        out.append(f"repairs: {repairs or 'none'}")
        return out
