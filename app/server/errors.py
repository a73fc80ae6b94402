"""OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`, for every refusal."""

from __future__ import annotations

from starlette.responses import JSONResponse


def error_response(status: int, message: str, *, param=None, code=None, type_="invalid_request_error",
                   headers=None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}},
                        status_code=status, headers=headers)
