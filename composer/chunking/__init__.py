"""Cut documents into chunks that keep their document id and exact character offsets."""

from composer.chunking.chunk import Chunk, chunk_corpus, chunk_document

__all__ = ["Chunk", "chunk_corpus", "chunk_document"]
