"""Static files in production, with or without a ``collectstatic`` step.

WhiteNoise serves the apps' files itself (``WHITENOISE_USE_FINDERS``), so every
page works on a fresh checkout. Once ``collectstatic`` has run, its manifest maps
each file to a content-hashed name that browsers may cache for good, and pages
link to those names. A file the manifest does not know (nothing was collected, or
it was added since) is linked by its own name and served from its app, instead of
failing the page as Django's manifest storage would.
"""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class CollectedOrAppStaticFilesStorage(CompressedManifestStaticFilesStorage):  # type: ignore[misc]
    def stored_name(self, name: str) -> str:
        if not self.hashed_files:
            return name
        try:
            stored: str = super().stored_name(name)
        except ValueError:
            return name
        return stored
