from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
