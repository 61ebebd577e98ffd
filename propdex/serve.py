"""`propdex serve`: an index behind HTTP (FastAPI + uvicorn, the `[serve]` extra).

    GET    /v1/search?q=...&k=10&level=doc     one query (every search option; where=year>=2020, repeatable)
    POST   /v1/search                          {"query": "..."} or {"queries": [...]}, "k", "level", "where", "hybrid", ...
    POST   /v1/context                         {"query", "words": 200, "level": "sentence", "where", "hybrid", ...}:
                                               the best hits packed into a prompt, every piece cited
    GET    /v1/docs/{id}                       the stored document
    POST   /v1/docs                            {"documents": [...], "update": false}: add (or update)
    DELETE /v1/docs/{id}
    GET    /v1/info, /healthz, /docs (OpenAPI)

Hits are `propdex search --json`'s. Searches run concurrently (FastAPI's
thread pool), each on a committed view; writes are serialised by the index's
writer, and every worker moves to a new commit at its next request. A bad
request is a 4xx with {"error": "one line"}, never a traceback. With a token
(`--token`, or PROPDEX_TOKEN) the write routes need `Authorization: Bearer`.
"""
from __future__ import annotations

import hmac
import logging
import os
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, create_model, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from propdex.index import Index
from propdex.encoders.options import fields_of
from propdex.indexer.info import summary
from propdex.retriever import filters
from propdex.retriever.settings import SearchSettings

log = logging.getLogger(__name__)

MAX_K = 1000
MAX_QUERIES = 256
MAX_BODY_BYTES = 16 << 20
MAX_CONTEXT_WORDS = 100_000


def option_fields(get: bool = False) -> dict[str, Any]:
    """SearchSettings' options as request fields, from their one declaration
    (encoders.options). Each defaults to None, the setting's own default;
    SearchSettings validates them. In a GET, `where` is repeated clauses as on
    the command line (`where=year>=2020&where=team!=web`)."""
    fields = {}
    for d in fields_of(SearchSettings):
        kind = d.base if d.base in (bool, int, float, str) else str
        if d.name == "where":
            kind = list[str] if get else dict[str, Any]
        limits = {"le": MAX_K} if d.name == "k" else {}
        fields[d.name] = (kind | None, Field(None, description=d.option.help, **limits))
    return fields


SearchOptions = create_model("SearchOptions", **option_fields())
GetOptions = create_model("GetOptions", **option_fields(get=True))


class SearchRequest(SearchOptions):
    """One `query` (answered as GET answers it) or a batch of `queries`, not both."""

    query: str | None = None
    queries: list[str] | None = Field(None, min_length=1, max_length=MAX_QUERIES)

    @model_validator(mode="after")
    def _one_of(self) -> "SearchRequest":
        if (self.query is None) == (self.queries is None):
            raise ValueError("give one query (\"query\": \"...\") or a batch (\"queries\": [...]), not both")
        return self


class ContextRequest(SearchOptions):
    """Options left out take Index.context's defaults (retriever.context.CONTEXT_DEFAULTS)."""

    query: str
    words: int = Field(200, ge=1, le=MAX_CONTEXT_WORDS)


class DocumentsRequest(BaseModel):
    documents: list[dict[str, Any]] = Field(min_length=1)
    update: bool = False  # replace documents the index holds under the same id


class Problem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def create_app(index: Index, token: str | None = None) -> FastAPI:
    app = FastAPI(title="propdex", summary=f"search {index.path}", version=_version())

    def writer_allowed(authorization: str | None = Header(None)) -> None:
        if token is None:
            return
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            raise Problem(401, "this route needs Authorization: Bearer <token>")

    @app.middleware("http")
    async def bounded(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _error(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            return await call_next(request)
        except Exception as e:  # noqa: BLE001 - answered here: a handler of Exception re-raises to uvicorn, which drops the connection
            log.exception("request failed")
            return _error(500, f"internal error ({type(e).__name__}); the server log has the details")

    @app.exception_handler(Problem)
    async def problem(_: Request, e: Problem) -> JSONResponse:
        return _error(e.status, str(e))

    @app.exception_handler(ValueError)
    async def bad_value(_: Request, e: ValueError) -> JSONResponse:
        return _error(400, str(e).splitlines()[0] if str(e) else "bad request")

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query"))
        return _error(400, f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid request")))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail))

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        _fresh(index)
        return {"status": "ok", "documents": len(index), "generation": index.manifest.get("generation", 0)}

    @app.get("/v1/info")
    def info() -> dict[str, Any]:
        return summary(index.path) | {"query_runtime": index.encoder.backbone.runtime}

    @app.get("/v1/search")
    def search_one(options: Annotated[GetOptions, Query()], q: str = Query(..., description="the query")) -> dict[str, Any]:
        given = options.model_dump(exclude_none=True)
        if "where" in given:
            try:
                given["where"] = filters.from_clauses([filters.cli_clause(c) for c in given["where"]])
            except ValueError as e:
                raise Problem(400, f"where: {e}") from None
        return {"query": q, "results": _search(index, [q], **given)[0]}

    @app.post("/v1/search")
    def search_many(body: SearchRequest) -> dict[str, Any]:
        options = body.model_dump(exclude={"query", "queries"}, exclude_none=True)
        if body.query is not None:
            return {"query": body.query, "results": _search(index, [body.query], **options)[0]}
        assert body.queries is not None
        results = _search(index, body.queries, **options)
        return {"results": [{"query": q, "results": hits} for q, hits in zip(body.queries, results)]}

    @app.post("/v1/context")
    def context(body: ContextRequest) -> dict[str, Any]:
        if not body.query.strip():
            raise Problem(400, "empty query")
        _fresh(index)
        options = body.model_dump(exclude={"query", "words", "level"}, exclude_none=True)
        return {"query": body.query, **index.context(body.query, body.words, body.level, **options).to_json()}

    @app.get("/v1/docs/{doc_id}")
    def get_document(doc_id: str) -> dict[str, Any]:
        _fresh(index)
        doc = index.get(doc_id)
        if doc is None:
            raise Problem(404, f"no document {doc_id!r}")
        return {"id": doc.id, "title": doc.title, "text": doc.text, "metadata": dict(doc.metadata)}

    @app.post("/v1/docs", dependencies=[Depends(writer_allowed)])
    def put_documents(body: DocumentsRequest) -> dict[str, Any]:
        return index.update(body.documents) if body.update else index.add(body.documents)

    @app.delete("/v1/docs/{doc_id}", dependencies=[Depends(writer_allowed)])
    def delete_document(doc_id: str) -> dict[str, Any]:
        result = index.delete([doc_id])
        if not result["deleted"]:
            raise Problem(404, f"no document {doc_id!r}")
        return result

    return app


def _fresh(index: Index) -> None:
    """Move to the index's latest commit. One that cannot be opened (a
    damaged index) is the server's fault, not the request's: 503, logged,
    and tried again by the next request."""
    try:
        index.refresh_if_changed()
    except ValueError as e:
        log.error("cannot open the latest commit of %s: %s", index.path, e)
        raise Problem(503, f"the index's latest commit cannot be opened: {str(e).splitlines()[0]}") from None


def _search(index: Index, queries: list[str], **options: Any) -> list[list[dict[str, Any]]]:
    if any(not q.strip() for q in queries):
        raise Problem(400, "empty query")
    _fresh(index)
    return [[h.to_json() for h in hits] for hits in index.search_batch(queries, **options)]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _version() -> str:
    import propdex

    return propdex.__version__


def app_from_env() -> FastAPI:
    """The app for uvicorn's workers: the index and token come from the environment."""
    path = os.environ["PROPDEX_SERVE_INDEX"]
    threads = os.environ.get("PROPDEX_SERVE_THREADS")
    index = Index.open(Path(path), device=os.environ.get("PROPDEX_SERVE_DEVICE", "auto"), threads=int(threads) if threads else None,
                       runtime=os.environ.get("PROPDEX_SERVE_RUNTIME", "torch"))
    return create_app(index, token=os.environ.get("PROPDEX_TOKEN") or None)


def serve(path: Path, host: str = "127.0.0.1", port: int = 8000, workers: int = 1, token: str | None = None,
          device: str = "auto", threads: int | None = None, runtime: str = "torch") -> None:
    import uvicorn

    if threads is not None:
        os.environ["PROPDEX_SERVE_THREADS"] = str(threads)

    Index.open(path, device="cpu", runtime=runtime).close()  # a missing or damaged index (or runtime) is an error here, before any worker starts
    os.environ["PROPDEX_SERVE_INDEX"] = str(Path(path).resolve())
    os.environ["PROPDEX_SERVE_DEVICE"] = device
    os.environ["PROPDEX_SERVE_RUNTIME"] = runtime
    if token:
        os.environ["PROPDEX_TOKEN"] = token
    uvicorn.run("propdex.serve:app_from_env", factory=True, host=host, port=port, workers=workers, log_level="warning")
