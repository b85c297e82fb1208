"""``accordion ui``: a web page of the live cluster (Starlette, served by uvicorn)."""
