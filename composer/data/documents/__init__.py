"""Documents as teams keep them: folders of PDF, Word, PowerPoint, HTML, Markdown and text files.

One module per format (``pdf``, ``office``, ``html``, ``plain``), the Arabic and Persian ``repair`` every
extracted text goes through, a content-hash ``cache`` and the per-corpus ``tally``; ``folder`` ties them.
Heavy libraries (pypdf, python-docx, python-pptx, BeautifulSoup) are imported only when a file needs them.
"""

from composer.data.documents.extracted import SKIP_REASONS, Extracted, Skipped
from composer.data.documents.folder import DOCUMENT_EXTENSIONS, read_documents
from composer.data.documents.tally import ReadTally

__all__ = ["DOCUMENT_EXTENSIONS", "SKIP_REASONS", "Extracted", "ReadTally", "Skipped", "read_documents"]
