"""The HTTP service (docs/design.md P2, P3): ``create_app(app)`` → a FastAPI application."""

from shelfhand.api.deps import ServiceConfig
from shelfhand.api.server import build_service, create_app

__all__ = ["ServiceConfig", "build_service", "create_app"]
