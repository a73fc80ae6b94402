"""Scripts: timed pauses, expression tags, the lexicon, a cast of voices, likeness and
best-of-N, and long renders that resume after a crash (engine_native.script, .lexicon,
.likeness, .tags; app.cli.script_cli; app.core.long_render).

Nano Q4_0 with random weights (its test snapshot's tokenizer has the 19 added tags, as
Turbo's has). Random weights never draw the stop token, so a piece is exactly
(max_tokens + 3 silence tokens) x 2 mel frames x 480 samples long; max_tokens stays tiny
so these tests run in minutes on two cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from engine_native import Engine, ParameterError
from engine_native.lexicon import Lexicon, LexiconError
from engine_native.script import Pause, chapters, parse_script, pieces, render_all, speaker_names
from tests.helpers.models import model_path

N = 4   # speech tokens per piece


def piece_samples(n_tokens: int = N) -> int:
    return (n_tokens + 3) * 2 * 480


@pytest.fixture(scope="module")
def model():
    return model_path("nano", "q4_0")


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model)


# ------------------------------------------------------------------ parsing (no model)
def test_pause_tags_ssml_and_paragraphs_parse_to_exact_pauses():
    text = ("Hello there. [pause 0.5s] This is [PAUSE 250ms] a test!\n\n"
            "<speak>New <break time=\"1s\"/> para <break time='120ms'/> here.</speak> [pause] stays.")
    items = parse_script(text, paragraph_pause=0.6)
    pauses = [(i.seconds, i.kind) for i in items if isinstance(i, Pause)]
    assert pauses == [(0.5, "tag"), (0.25, "tag"), (0.6, "paragraph"), (1.0, "ssml"), (0.12, "ssml")]
    spoken = [p.text for p in pieces(items)]
    assert spoken == ["Hello there.", "This is", "a test!", "New", "para", "here.", "[pause] stays."]
    assert [p.index for p in pieces(items)] == list(range(7))
    for p in pieces(items):             # spans point into the input; no timed tag reaches the text
        assert "pause 0" not in p.text and "<" not in p.text
        assert p.text.split()[0] in text[p.start:p.end]
    # The default paragraph pause, blank lines with spaces, and no pause before the first words.
    items = parse_script("\n\nOne.\n \n\n Two.")
    assert [type(i).__name__ for i in items] == ["Piece", "Pause", "Piece"] and items[1].seconds == 0.75
    with pytest.raises(ParameterError, match="pause"):
        parse_script("x [pause 99s] y")


def test_cast_prefixes_and_chapters_parse():
    text = "Alice: Hello there.\nBob: Good morning. How are you?\nNote: this is narration.\nPlain line."
    assert speaker_names(text) == ["Alice", "Bob", "Note"]
    items = pieces(parse_script(text, speakers={"alice", "BOB"}))
    assert [(p.speaker, p.text) for p in items] == [
        ("alice", "Hello there."), ("BOB", "Good morning."), ("BOB", "How are you?"),
        (None, "Note: this is narration."), (None, "Plain line.")]
    assert all(p.speaker is None for p in pieces(parse_script(text)))          # no cast: no speakers
    book = "# One\nFirst.\n\n# Two\nSecond."
    assert chapters(book) == [("One", 0), ("Two", book.index("# Two"))]
    assert [p.text for p in pieces(parse_script(book))] == ["One", "First.", "Two", "Second."]


# ------------------------------------------------------------------ pauses through the engine
def test_a_pause_tag_adds_exactly_its_silence(engine):
    with_tag, _ = render_all(engine, parse_script("Hello there. [pause 0.5s] This is a test!"), seed=3,
                             options={"max_tokens": N})
    plain, finals = render_all(engine, parse_script("Hello there. This is a test!"), seed=3,
                               options={"max_tokens": N})
    # The script renderer seeds pieces as Engine.stream seeds sentences: the same samples.
    stream = np.concatenate([c.samples for c in engine.stream("Hello there. This is a test!", seed=3,
                                                               max_tokens=N)])
    assert np.array_equal(plain, stream)
    gap = int(round(0.5 * engine.sample_rate))
    n1 = piece_samples()
    assert with_tag.size == plain.size + gap
    assert np.array_equal(with_tag[:n1], plain[:n1])
    assert not np.any(with_tag[n1:n1 + gap])
    assert np.array_equal(with_tag[n1 + gap:], plain[n1:])
    assert [f.seed for f in finals] == [3, 4]


# ------------------------------------------------------------------ expression tags
def test_expression_tags_survive_normalisation_to_their_token_ids(engine):
    from engine_native import debug

    tags = engine.expression_tags
    assert len(tags) == 19 and tags[0] == "[laugh]" and "[pause]" in tags and "[clear throat]" in tags
    ids = {t: int(debug.tokenize(str(engine.path), t)[0]) for t in tags}
    assert all(len(debug.tokenize(str(engine.path), t)) == 1 for t in tags)      # each tag is one added token
    for tag in tags:
        text = f"Well {tag} that was odd."
        (piece,) = pieces(parse_script(text))
        assert piece.text == text                                                # the parser keeps it
        toks = engine.text_tokens(piece.text)
        assert toks.count(ids[tag]) == 1, (tag, toks)
    # A timed pause never reaches the tokenizer; a bare [pause] does, as its id.
    spoken = [p.text for p in pieces(parse_script("Wait [pause 1s] for it [pause] now."))]
    toks = [t for s in spoken for t in engine.text_tokens(s)]
    assert ids["[pause]"] in toks and toks.count(ids["[pause]"]) == 1
    assert "1s" not in " ".join(spoken)


# ------------------------------------------------------------------ lexicon
def test_a_lexicon_entry_changes_the_token_ids_of_its_word_and_nothing_else(engine, tmp_path):
    lex = Lexicon()
    lex.add("Nguyen", "Win")
    text = "Yesterday I met Mister NGUYEN at the old station."
    spoken, spans = lex.apply(text)
    assert spoken == "Yesterday I met Mister Win at the old station."
    before, after = engine.text_tokens(text), engine.text_tokens(spoken)
    k = 0
    while before[k] == after[k]:
        k += 1
    j = 0
    while before[-1 - j] == after[-1 - j]:
        j += 1
    assert k > 0 and j > 0                              # tokens before and after the word are untouched
    # What differs decodes to the word and its respelling only.
    tok = engine.stages.text.tokenizer
    assert tok.decode(before[k:len(before) - j]).strip() == "NGUYEN"
    assert tok.decode(after[k:len(after) - j]).strip() == "Win"
    # Spans of the spoken text map back to the input's.
    w = spoken.index("Win")
    assert spans.span(w, w + 3) == (text.index("NGUYEN"), text.index("NGUYEN") + 6)
    at = spoken.index("station")
    assert spans.span(at, at + 7) == (text.index("station"), text.index("station") + 7)


def test_lexicon_rules_and_files(tmp_path):
    lex = Lexicon()
    lex.add("New York", "Noo Yawk")
    lex.add("York", "Yorrk")
    lex.add("cat", "kat")
    assert lex.respell("New  york and York, catalog cat.") == "Noo Yawk and Yorrk, catalog kat."
    p = lex.save(tmp_path / "l.json")
    data = json.loads(p.read_text())
    assert data["format"] == "chatterbox-lexicon" and {"word": "cat", "say": "kat"} in data["entries"]
    assert Lexicon.load(p).items() == lex.items()
    (tmp_path / "l.tsv").write_text("# comment\ncat\tcaat\n\nSQL\tsequel\n")
    merged = Lexicon.load(p).merged(Lexicon.load(tmp_path / "l.tsv"))     # the later list wins
    assert merged.respell("cat SQL sql") == "caat sequel sequel"
    (tmp_path / "bad.tsv").write_text("no tab here\n")
    with pytest.raises(LexiconError, match="bad.tsv:1"):
        Lexicon.load(tmp_path / "bad.tsv")


# ------------------------------------------------------------------ cast, likeness, best-of
@pytest.fixture(scope="module")
def two_voices(engine, tmp_path_factory):
    from tests.helpers import audio_fixtures as af

    if not af.tools_available():
        pytest.skip("needs espeak-ng and ffmpeg")
    folder = str(tmp_path_factory.mktemp("voices"))
    out = []
    for name, ev in (("Alice", "en+f3"), ("Bob", "en+m3")):
        path = os.path.join(folder, f"{name}.wav")
        subprocess.run(["espeak-ng", "-v", ev, "-s", "150", "-w", path,
                        "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
                        "She sells sea shells by the sea shore."], check=True, capture_output=True)
        x, sr = sf.read(path, dtype="float32")
        v = engine.voice_from_audio(x, sr, name=name)
        v.save(os.path.join(folder, f"{name}.voice.gguf"))
        out.append(v)
    return folder, out


def test_a_two_voice_script_speaks_each_line_with_its_voice(engine, two_voices):
    _, (alice, bob) = two_voices
    text = "Alice: Hello there.\nBob: Good morning."
    items = parse_script(text, speakers={"Alice", "Bob"})
    audio, finals = render_all(engine, items, voices={"Alice": alice, "Bob": bob}, seed=11,
                               options={"max_tokens": N})
    assert [f.item.speaker for f in finals] == ["Alice", "Bob"]
    n = piece_samples()
    lines = [audio[:n], audio[n:]]
    for (line, voice, other), seed, got in zip((("Hello there.", alice, bob), ("Good morning.", bob, alice)),
                                               (11, 12), lines):
        alone = np.concatenate([c.samples for c in engine.stream(line, voice, seed=seed, max_tokens=N)])
        assert np.array_equal(got, alone)                 # sample-exact: this line used this voice
        wrong = np.concatenate([c.samples for c in engine.stream(line, other, seed=seed, max_tokens=N)])
        assert not np.array_equal(got, wrong)
        # And by the voices' own embeddings: the line's likeness to its voice is the one recomputed.
        from engine_native.likeness import likeness

        assert likeness(engine, got, voice) == pytest.approx(likeness(engine, alone, voice), abs=1e-6)


def test_best_of_n_keeps_the_take_with_the_highest_score(engine, two_voices):
    from engine_native.likeness import best_take, likeness

    _, (alice, _) = two_voices
    seeds = [5, 6, 7]
    take = best_take(engine, "Hi there.", alice, seeds=seeds, options={"max_tokens": N})
    assert [c[0] for c in take.candidates] == seeds
    scores = [c[1] for c in take.candidates]
    assert all(c[3] for c in take.candidates)                    # all of a plausible length here
    assert take.score == max(scores) and take.seed == seeds[int(np.argmax(scores))]
    # The kept audio is that seed's take, and its score is its likeness.
    again = np.concatenate([c.samples for c in engine.stream("Hi there.", alice, seed=take.seed, max_tokens=N)])
    assert np.array_equal(take.samples, again)
    assert likeness(engine, again, alice) == pytest.approx(take.score, abs=1e-6)
    # Random weights make every likeness ~1.0; a scorer that tells the takes apart shows the choice too.
    rms = lambda a: float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))  # noqa: E731
    take = best_take(engine, "Hi there.", alice, seeds=seeds, options={"max_tokens": N}, scorer=rms)
    scores = [c[1] for c in take.candidates]
    assert len(set(scores)) == 3 and take.score == max(scores) and take.seed == seeds[int(np.argmax(scores))]
    assert rms(take.samples) == take.score


def test_best_of_prefers_a_plausible_length():
    from engine_native.likeness import choose, plausible_seconds

    lo, hi = plausible_seconds("A sentence of some forty characters, ok.")
    assert 0 < lo < 40 / 14 < hi
    cands = [(1, 0.91, 2.0, True), (2, 0.97, 30.0, False), (3, 0.93, 2.5, True)]
    assert choose(cands) == 2                                   # the best plausible, not the best overall
    assert choose([(1, 0.5, 30.0, False), (2, 0.6, 40.0, False)]) == 1   # none plausible: the best score


# ------------------------------------------------------------------ the command line
def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, timeout=900, **kw)


def _env(tmp_path):
    return {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}


def test_cli_say_with_cast_lexicon_and_pauses(model, two_voices, tmp_path):
    folder, _ = two_voices
    lib = tmp_path / "xdg" / "chatterbox-studio" / "chatterbox-studio" / "voices"
    lib.mkdir(parents=True)
    os.link(os.path.join(folder, "Bob.voice.gguf"), lib / "bob.voice.gguf")     # Bob from the library, by name
    (tmp_path / "book.txt").write_text("Alice: Hi Nguyen. [pause 200ms]\nBob: Yes.\n")
    (tmp_path / "names.tsv").write_text("Nguyen\tWin\n")
    r = _cli("say", "-f", "book.txt", "-m", str(model), "-o", "out.wav", "--seed", "2", "--max-tokens", str(N),
             "--cast", f"Alice={folder}/Alice.voice.gguf", "Bob=Bob", "--lexicon", "names.tsv",
             cwd=tmp_path, env=_env(tmp_path))
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "cast      Alice: Alice" in err and "cast      Bob: Bob" in err and "lexicon   names.tsv" in err
    assert "progress  2/2 sentences" in err and "Traceback" not in err
    wav, rate = sf.read(tmp_path / "out.wav", dtype="float32")
    # (A cloned voice's odd prompt frame can shorten a piece by half a token: lengths are within a token.)
    assert abs(wav.size - (2 * piece_samples() + int(0.2 * rate))) <= 960
    zero = np.flatnonzero(wav[piece_samples() - 960:] != 0)            # the pause: a run of 4800 zeros
    assert np.max(np.diff(zero)) - 1 >= int(0.2 * rate)
    assert not os.path.exists(tmp_path / "out.wav.parts")          # removed once the output is written
    r = _cli("say", "Hi.", "-m", str(model), "-o", "x.wav", "--cast", "Carol=nobody", cwd=tmp_path,
             env=_env(tmp_path))
    assert r.returncode == 1 and "no voice file or library voice named 'nobody'" in r.stderr.decode()


def test_a_long_render_killed_halfway_resumes_to_the_same_audio(model, tmp_path):
    book = "# Part one\nThe first line. The second line.\n\n# Part two\nThe third line. The fourth line.\n"
    args = ["-m", str(model), "--seed", "9", "--max-tokens", str(N), "--chapters", "headings"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "book.txt").write_text(book)
    whole = _cli("say", "-f", "book.txt", "-o", "book.wav", *args, cwd=tmp_path / "a", env=_env(tmp_path))
    assert whole.returncode == 0, whole.stderr.decode()
    # Killed (SIGKILL: no clean-up at all) once two pieces are on disk.
    parts = tmp_path / "b" / "book.wav.parts"
    p = subprocess.Popen([sys.executable, "-m", "app", "say", "-f", "book.txt", "-o", "book.wav", *args],
                         cwd=tmp_path / "b", env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and len(list(parts.glob("*.wav"))) < 2 and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    done = len(list(parts.glob("*.wav")))
    assert 2 <= done < 6 and not (tmp_path / "b" / "book.wav").exists()
    again = _cli("say", "-f", "book.txt", "-o", "book.wav", *args, "--keep-parts", cwd=tmp_path / "b",
                 env=_env(tmp_path))
    err = again.stderr.decode()
    assert again.returncode == 0, err
    assert f"resume    {done} finished pieces" in err
    a, _ = sf.read(tmp_path / "a" / "book.wav", dtype="int16")
    b, _ = sf.read(tmp_path / "b" / "book.wav", dtype="int16")
    assert a.size == 6 * piece_samples() + int(0.75 * 24000) and np.array_equal(a, b)
    # Chapter files: one per heading, together the whole.
    r = _cli("say", "-f", "book.txt", "-o", "book.wav", *args, "--chapter-files", cwd=tmp_path / "b",
             env=_env(tmp_path))
    assert r.returncode == 0, r.stderr.decode()
    c1, _ = sf.read(tmp_path / "b" / "book-01.wav", dtype="int16")
    c2, _ = sf.read(tmp_path / "b" / "book-02.wav", dtype="int16")
    assert np.array_equal(np.concatenate([c1, c2]), a) and c1.size == 3 * piece_samples() + 18000
    assert "resume    6 finished pieces" in r.stderr.decode()              # nothing rendered again


def test_bake_into_model_makes_the_clone_the_built_in_voice(model, engine, two_voices, tmp_path):
    from app.cli.common import clone_from_file

    folder, _ = two_voices
    wav = os.path.join(folder, "Alice.wav")
    r = _cli("bake", wav, "-m", str(model), "--into-model", "baked.gguf", "--name", "Narrator", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]        # atomic: no temp file left
    info = _cli("info", "baked.gguf", cwd=tmp_path).stdout.decode()
    assert "built-in voice    Narrator (baked from Alice.wav, sha256 " in info
    assert "built-in voice    the model's own" in _cli("info", str(model)).stdout.decode()
    # The baked model's own voice speaks exactly as the clone does with the original model.
    clone = clone_from_file(engine, wav)
    baked = Engine(tmp_path / "baked.gguf")
    assert np.array_equal(baked.synthesize("Hi there.", seed=1, max_tokens=N),
                          engine.synthesize("Hi there.", clone, seed=1, max_tokens=N))
    assert not np.array_equal(baked.synthesize("Hi there.", seed=1, max_tokens=N),
                              engine.synthesize("Hi there.", seed=1, max_tokens=N))


def test_chapter_marks_in_an_mp3_read_back_with_ffprobe(tmp_path):
    """The MP3 container's chapter marks (ID3v2 CHAP frames): titles and times as written, the
    audio copied, not re-encoded."""
    import shutil

    from app.core.long_render import add_chapter_marks

    if not (shutil.which("ffmpeg") and shutil.which("ffprobe")):
        pytest.skip("needs ffmpeg")
    mp3 = tmp_path / "book.mp3"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=f=220:d=3:r=24000",
                    "-c:a", "libmp3lame", "-b:a", "64k", str(mp3)], check=True)
    before = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=duration,bit_rate", "-of", "json",
                             str(mp3)], capture_output=True, check=True).stdout
    add_chapter_marks(str(mp3), [("Part one; the start", 0, 24000), ("Part = two", 24000, 72000)], 24000)
    probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_chapters", "-of", "json", str(mp3)],
                                      capture_output=True, check=True).stdout)
    got = [(c["tags"]["title"], float(c["start_time"]), float(c["end_time"])) for c in probe["chapters"]]
    assert got == [("Part one; the start", 0.0, 1.0), ("Part = two", 1.0, 3.0)]
    after = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=duration,bit_rate", "-of", "json",
                            str(mp3)], capture_output=True, check=True).stdout
    assert json.loads(after) == json.loads(before)
    assert [p.name for p in tmp_path.iterdir()] == ["book.mp3"]          # atomic: no temp file left
