"""The static part of a :class:`~llmguard_sdk.prompts.PromptBuilder`'s prompt (instructions,
tools, examples, documents), rendered once per change, with its ``prefix_hash``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._json import canonical_json
from ..tokens import count_text_tokens
from .adapters import static_prefix_hash

if TYPE_CHECKING:  # (only named in annotations: builder.py imports this module)
    from .builder import Document, Example

__all__ = ["_Static"]


@dataclass(frozen=True)
class _Static:
    """The static part, rendered once per change."""

    instructions: str = ""
    tools: tuple[dict[str, Any], ...] = ()
    examples: tuple[Example, ...] = ()
    documents: tuple[Document, ...] = ()
    examples_heading: str = "## Examples"
    documents_heading: str = "## Reference documents"
    sections: dict[str, str] = field(init=False, repr=False)
    text: str = field(init=False, repr=False)
    prefix_hash: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        sections: dict[str, str] = {}
        if self.instructions:
            sections["instructions"] = self.instructions
        if self.tools:
            sections["tools"] = canonical_json(list(self.tools))
        if self.examples:
            shots = [f"User: {e.user}\nAssistant: {e.assistant}" for e in self.examples]
            sections["examples"] = "\n\n".join([self.examples_heading, *shots])
        if self.documents:
            docs = [
                f"### {d.title or d.id or f'Document {i}'}\n{d.text}"
                for i, d in enumerate(self.documents, 1)
            ]
            sections["documents"] = "\n\n".join([self.documents_heading, *docs])
        text = "\n\n".join(v for k, v in sections.items() if k != "tools")
        digest = static_prefix_hash(text, self.tools)
        object.__setattr__(self, "sections", sections)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "prefix_hash", digest)

    def tokens(self) -> int:
        """About how many tokens the static part is: its text and its tools."""
        tools = canonical_json(list(self.tools)) if self.tools else ""
        return count_text_tokens(self.text + tools).tokens

    @property
    def lint_sections(self) -> dict[str, str]:
        """What the linter reads: each section's own text (tools as canonical JSON)."""
        out = dict(self.sections)
        out.pop("examples", None)
        out.pop("documents", None)
        for i, example in enumerate(self.examples):
            out[f"examples[{i}].user"] = example.user
            out[f"examples[{i}].assistant"] = example.assistant
        for i, document in enumerate(self.documents):
            if document.title:
                out[f"documents[{i}].title"] = document.title
            out[f"documents[{i}]"] = document.text
        return out
