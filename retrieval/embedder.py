"""The movie table's embedder as LanceDB's registry knows it. Imported by retrieval.store on first use
(opening the database or creating an embedding function), so the app starts without importing lancedb."""

from __future__ import annotations

from lancedb.embeddings import register
from lancedb.embeddings.sentence_transformers import SentenceTransformerEmbeddings

from retrieval import store  # through the module, so a test's stand-in model is what loads
from retrieval.store import REGISTRY_NAME


@register(REGISTRY_NAME)
class StudioSentenceTransformer(SentenceTransformerEmbeddings):
    """LanceDB's sentence-transformers embedder, with the bundled model addressed by a portable name
    (the table's metadata stores 'bundled/all-MiniLM-L6-v2', not a site-packages path), a fast, clear
    failure when a hub model can't be fetched, and a cache of query vectors (the query is most of a
    warm search's time)."""

    trust_remote_code: bool = False

    def get_embedding_model(self):
        return store.load_sentence_model(self.name)

    def compute_query_embeddings(self, query, *args, **kwargs):
        if not isinstance(query, str):  # a list of queries: not what the tab sends, computed as usual
            return super().compute_query_embeddings(query, *args, **kwargs)
        key = (self.name, self.normalize, query)
        vector = store.query_vectors.get(key)
        if vector is None:
            vector = store.query_vectors.put(key, super().compute_query_embeddings(query, *args, **kwargs)[0])
        return [list(vector)]
