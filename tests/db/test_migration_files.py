"""Migration files are named in chain order, so reading the folder top to
bottom reads the schema's history; revision ids never change (existing
databases upgrade by id, not by file name)."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from judgeflow.db.migrate import _config


def test_file_names_follow_the_chain_from_base_to_head():
    scripts = ScriptDirectory.from_config(_config())
    chain = list(reversed(list(scripts.walk_revisions("base", "heads"))))
    names = [script.path.rsplit("/", 1)[-1] for script in chain]
    assert len(scripts.get_heads()) == 1
    assert names == sorted(names)
    assert [name.split("_", 1)[0] for name in names] == [f"{i:02d}" for i in range(1, len(names) + 1)]


def test_existing_revision_ids_are_kept():
    scripts = ScriptDirectory.from_config(_config())
    ids = {script.revision for script in scripts.walk_revisions("base", "heads")}
    assert {f"{i:04d}" for i in range(1, 11)} <= ids
