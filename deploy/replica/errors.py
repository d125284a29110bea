"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

``install(app)`` makes every error of the app answer this way: request validation (400 on the
OpenAI routes, 422 on the signals routes; ``param`` names the field and ``code`` the rule, the
offending value is never echoed — it may be NaN, which JSON cannot carry), ``HTTPException`` (its
status, e.g. 413 for a large body, 503 while loading) and ``APIError`` raised by the routes.
Anything unexpected is a 500 with a generic message, logged.

Codes a client can act on: ``invalid_api_key`` (401), ``model_not_found`` (404),
``unsupported_parameter`` / ``unsupported_value`` (400, ``param`` names it), ``invalid_value``
(400, e.g. ``max_tokens`` over the limit), ``context_length_exceeded`` (400),
``request_too_large`` (413), ``request_timeout`` (408), ``model_not_ready`` (503).

Deliberately left out: retries and rate limits (no 429 is produced).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    503: "service_unavailable",
}


class APIError(Exception):
    """An error a route answers with: status, message and the field it is about."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        *,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind, self.headers = kind, headers


def error_body(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    kind: str | None = None,
):
    kind = kind or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int, message: str, param: str | None = None, code=None, headers=None, kind=None
):
    return JSONResponse(error_body(status, message, param, code, kind), status, headers=headers)


def _param(err: dict) -> str | None:
    where = (err.get("ctx") or {}).get("where")
    if where:
        return str(where)
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    # drop pydantic's union-branch labels such as "str" / "list[str]" / "function-after[...]"
    loc = [p for p in loc if not (p in ("str", "int", "float") or "[" in p)]
    return ".".join(loc) or None


def _validation_message(err: dict, param: str | None) -> str:
    msg = str(err.get("msg", "invalid value"))
    return f"{param}: {msg}" if param and not msg.startswith(f"{param}:") else msg


def validation_error(exc: RequestValidationError, status: int = 400) -> JSONResponse:
    """The OpenAI-shaped answer to a failed validation: the first error's field and rule."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return error_response(status, f"body is not valid JSON: {first.get('msg')}", None, "json")
    param = _param(first)
    message = _validation_message(first, param)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return error_response(status, message, param, str(first.get("type", "invalid")))


async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    return validation_error(exc)


async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = getattr(exc, "code", None)
    return error_response(exc.status_code, str(exc.detail), code=code, headers=exc.headers)


async def _on_api_error(request: Request, exc: APIError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers, exc.kind)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s", request.url.path)
    return error_response(500, f"internal error ({type(exc).__name__})")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(APIError, _on_api_error)
    app.add_exception_handler(Exception, _on_unexpected)
