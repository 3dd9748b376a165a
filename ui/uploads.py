"""The file uploads of the Train and RAG tabs: checked by type behind Gradio's own check, copied under
<data>/uploads (kept on the server, never served), and named in messages as the user named them. No gradio."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pipeline.run_folder.paths import data_dir


class UploadRefused(ValueError):
    """A file of a type the tab does not read; the message names the file and the types it takes."""


@dataclass(frozen=True)
class StoredUpload:
    """An upload's copy under <data>/uploads and the file name the user gave it."""

    path: Path
    name: str

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)

    def tell(self, message: str) -> str:
        """A reader's message about the copy, with the user's file name in place of the copy's."""
        return message.replace(self.path.name, self.name)


def store_upload(file_path: str | None, allowed: Sequence[str]) -> StoredUpload | None:
    """Copy the upload at `file_path` under <data>/uploads; None when nothing was uploaded.

    Raises UploadRefused, and copies nothing, when its suffix is not one of `allowed` (e.g. [".csv"]): a caller
    that gets past the component's `file_types` (the API) meets this check.
    """
    if not file_path:
        return None
    src = Path(file_path)
    if src.suffix.lower() not in allowed:
        raise UploadRefused(f"{src.name}: use a {', '.join(allowed)} file.")
    dest_dir = data_dir() / "uploads"
    dest_dir.mkdir(parents=True, exist_ok=True)
    # A fresh prefix: two uploads of the same name never overwrite each other.
    dest = dest_dir / f"{uuid.uuid4().hex[:8]}-{src.stem}{src.suffix.lower()}"
    shutil.copyfile(src, dest)
    return StoredUpload(dest, src.name)
