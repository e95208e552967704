"""Memory that a run finds by what it is about.

- Full-text search over each entry's key and value. SQLite: an FTS5 table
  (``memory_app_memorysearch_fts``, Porter stemming, accents folded) of each
  entry's key and the words of its value, and ``memory_app_memorysearch`` numbering
  the entries for it; triggers on the entries keep both in step with every insert,
  change and delete, whoever makes it (the services, a cascade, a set-based purge).
  PostgreSQL: a generated ``tsvector`` column (``search``, English stemming, the key
  weighted above the value) with a GIN index. Existing entries are indexed here.
- ``memory_app_memoryembedding``: an entry's vector when embeddings are configured,
  deleted by the database with its entry. On PostgreSQL the ``vector`` extension
  (pgvector) is created when the server has it; without it, similarity is computed
  in SQL from the stored ``real[]``.
- Indexes that read an owner's entries newest first, one per scope.

The SQL that reads all this is in :mod:`goaai.sql`.
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import DatabaseError, migrations, models, transaction

import goaai.runtime.vocabulary
import memory_app.models

# The words of a JSON value: its strings and numbers, and the keys of its objects.
_BODY = (
    "(SELECT group_concat(trim("
    "coalesce(CASE WHEN typeof(j.key) = 'text' THEN j.key END, '') || ' ' || "
    "coalesce(CASE WHEN j.type IN ('text', 'integer', 'real') THEN j.atom END, '')"
    "), ' ') FROM json_tree({row}.value) AS j)"
)


def _indexed(row: str) -> str:
    return f"{row}.key, {_BODY.format(row=row)}"


SQLITE_SEARCH = [
    "CREATE TABLE memory_app_memorysearch ("
    "id INTEGER PRIMARY KEY, entry_id char(32) NOT NULL UNIQUE)",
    "CREATE VIRTUAL TABLE memory_app_memorysearch_fts USING fts5("
    "key, body, tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memory_search_insert AFTER INSERT ON memory_app_memoryentry BEGIN "
    "INSERT INTO memory_app_memorysearch (entry_id) VALUES (NEW.id); "
    "INSERT INTO memory_app_memorysearch_fts (rowid, key, body) "
    f"SELECT id, {_indexed('NEW')} FROM memory_app_memorysearch WHERE entry_id = NEW.id; "
    "END",
    "CREATE TRIGGER memory_search_update "
    "AFTER UPDATE OF key, value, scope, session_id, user_id, agent "
    "ON memory_app_memoryentry BEGIN "
    "DELETE FROM memory_app_memorysearch_fts WHERE rowid = "
    "(SELECT id FROM memory_app_memorysearch WHERE entry_id = OLD.id); "
    "INSERT INTO memory_app_memorysearch_fts (rowid, key, body) "
    f"SELECT id, {_indexed('NEW')} FROM memory_app_memorysearch WHERE entry_id = NEW.id; "
    "END",
    "CREATE TRIGGER memory_search_delete AFTER DELETE ON memory_app_memoryentry BEGIN "
    "DELETE FROM memory_app_memorysearch_fts WHERE rowid = "
    "(SELECT id FROM memory_app_memorysearch WHERE entry_id = OLD.id); "
    "DELETE FROM memory_app_memorysearch WHERE entry_id = OLD.id; "
    "END",
    "INSERT INTO memory_app_memorysearch (entry_id) SELECT id FROM memory_app_memoryentry",
    "INSERT INTO memory_app_memorysearch_fts (rowid, key, body) "
    f"SELECT s.id, {_indexed('e')} FROM memory_app_memorysearch s "
    "JOIN memory_app_memoryentry e ON e.id = s.entry_id",
]
SQLITE_SEARCH_REVERSE = [
    "DROP TRIGGER memory_search_insert",
    "DROP TRIGGER memory_search_update",
    "DROP TRIGGER memory_search_delete",
    "DROP TABLE memory_app_memorysearch_fts",
    "DROP TABLE memory_app_memorysearch",
]
POSTGRES_SEARCH = [
    "ALTER TABLE memory_app_memoryentry ADD COLUMN search tsvector GENERATED ALWAYS AS ("
    "setweight(to_tsvector('english'::regconfig, key), 'A') || "
    "setweight(jsonb_to_tsvector('english'::regconfig, value, "
    '\'["string", "numeric", "key"]\'), \'B\')) STORED',
    # Without a pending list: GIN's fast update leaves new entries in a list every
    # search reads whole until a vacuum merges it (a few ms after a batch of writes).
    "CREATE INDEX memory_search ON memory_app_memoryentry USING gin (search) "
    "WITH (fastupdate = off)",
]
POSTGRES_SEARCH_REVERSE = [
    "DROP INDEX memory_search",
    "ALTER TABLE memory_app_memoryentry DROP COLUMN search",
]
EMBEDDINGS = {
    "sqlite": "CREATE TABLE memory_app_memoryembedding ("
    "entry_id char(32) NOT NULL PRIMARY KEY "
    "REFERENCES memory_app_memoryentry (id) ON DELETE CASCADE, "
    "model varchar(200) NOT NULL, vector blob NOT NULL)",
    "postgresql": "CREATE TABLE memory_app_memoryembedding ("
    "entry_id uuid NOT NULL PRIMARY KEY "
    "REFERENCES memory_app_memoryentry (id) ON DELETE CASCADE, "
    "model varchar(200) NOT NULL, vector real[] NOT NULL)",
}


def _run(schema_editor: Any, statements: list[str]) -> None:
    for statement in statements:
        schema_editor.execute(statement, params=None)


def create_search(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_SEARCH)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRES_SEARCH)


def drop_search(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_SEARCH_REVERSE)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRES_SEARCH_REVERSE)


def create_embeddings(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        _create_vector_extension(connection)
    schema_editor.execute(EMBEDDINGS[connection.vendor], params=None)


def _create_vector_extension(connection: Any) -> None:
    """pgvector, where the server has it and this role may create it; without it,
    similarity is computed from the stored arrays (goaai.sql)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return
        try:
            with transaction.atomic(using=connection.alias):
                cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except DatabaseError:
            return


def drop_embeddings(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP TABLE memory_app_memoryembedding", params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("memory_app", "0001_initial"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("scope", goaai.runtime.vocabulary.MemoryScope["SESSION"])),
                fields=["session", "-updated_at"],
                name="memory_session_recent",
            ),
        ),
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("scope", goaai.runtime.vocabulary.MemoryScope["USER"])),
                fields=["user", "-updated_at"],
                name="memory_user_recent",
            ),
        ),
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("scope", goaai.runtime.vocabulary.MemoryScope["AGENT"])),
                fields=["agent", "-updated_at"],
                name="memory_agent_recent",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MemoryEmbedding",
                    fields=[
                        (
                            "entry",
                            models.OneToOneField(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                primary_key=True,
                                related_name="+",
                                serialize=False,
                                to="memory_app.memoryentry",
                            ),
                        ),
                        ("model", models.CharField(max_length=200)),
                        ("vector", memory_app.models.EmbeddingField()),
                    ],
                ),
            ],
            database_operations=[migrations.RunPython(create_embeddings, drop_embeddings)],
        ),
        migrations.RunPython(create_search, drop_search),
    ]
