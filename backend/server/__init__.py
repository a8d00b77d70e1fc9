"""The parts `backend.app.create_app` puts together: the background tasks the server runs while it is up
(`lifespan.py`), what wraps every request (`middleware.py`), the errors turned into answers (`error_handlers.py`),
the routes beside the API (`routes.py`) and the OpenAPI document's integer bounds (`openapi.py`)."""
