"""Print the backend's OpenAPI document (built from the app factory, no server, no Ray) to stdout.
`npm run gen:client` runs this, then @hey-api/openapi-ts turns it into src/client/."""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backend.app import create_app  # noqa: E402
from backend.settings import Settings  # noqa: E402

with tempfile.TemporaryDirectory() as data_dir:
    app = create_app(Settings(data_dir=Path(data_dir), dispatch=False))
    print(json.dumps(app.openapi(), indent=1, sort_keys=False))
