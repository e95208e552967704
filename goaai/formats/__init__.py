"""Date and time formats that replace the locale's (settings.FORMAT_MODULE_PATH)."""
