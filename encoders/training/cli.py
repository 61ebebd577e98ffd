"""`propdex train segmenter|proposition|nugget|docsplit|crossthought|hashing`."""
from __future__ import annotations

from pathlib import Path

from .. import WEIGHTS
from .data import WIKI_EXTRACTED

PROPSEGMENT = "../shared/data/propsegment/v1"


def add_commands(sub) -> None:
    p = sub.add_parser("train", help="train a small head or adapter: segmenter, proposition, nugget, idf, docsplit, crossthought, hashing")
    tsub = p.add_subparsers(dest="model", required=True, metavar="MODEL")

    s = tsub.add_parser("segmenter", help="word-pair proposition segmenter on PropSegment test segmentations")
    s.add_argument("--propsegment", type=Path, default=Path(PROPSEGMENT), help="PropSegment v1 folder (test split is read)")
    s.add_argument("--out", type=Path, default=WEIGHTS / "segmenter")
    s.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    s.add_argument("--epochs", type=int, default=40)
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--device", default="auto")
    s.set_defaults(run=_segmenter)

    e = tsub.add_parser("proposition", help="sub-sentence encoder head, distilled from the frozen backbone on Wikipedia sentences")
    e.add_argument("--wiki", type=Path, default=Path(WIKI_EXTRACTED), help="WikiExtractor folder (wiki_00..69 train, 70..99 held out)")
    e.add_argument("--out", type=Path, default=WEIGHTS / "proposition")
    e.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    e.add_argument("--sentences", type=int, default=40000, help="training sentences (each after its article's title)")
    e.add_argument("--heldout", type=int, default=2000, help="held-out sentences that pick the epoch")
    e.add_argument("--dim", type=int, default=256, help="output dimension")
    e.add_argument("--prefix", type=int, default=64, help="leading dimensions trained to retrieve alone (`proposition:dims=64`); 0: none")
    e.add_argument("--sentence-weight", type=float, default=0.5, help="weight of the sentence's mean in the teacher")
    e.add_argument("--hidden", type=int, default=1024)
    e.add_argument("--layers", default="2,4,6", help="backbone layers pooled side by side (0 = embeddings; must end with the last)")
    e.add_argument("--tau", type=float, default=0.05, help="InfoNCE temperature")
    e.add_argument("--relational-weight", type=float, default=1.0, help="weight of the term that keeps the query map's similarities")
    e.add_argument("--nce-weight", type=float, default=0.1, help="weight of InfoNCE beside the cosine to the teacher")
    e.add_argument("--nce-both", action="store_true",
                   help="InfoNCE both ways: each teacher (a query's side) must also pick its own student among the batch's, siblings included")
    e.add_argument("--select", choices=("cosine", "p1"), default="cosine",
                   help="what picks the epoch: held-out cosine to the teacher, or held-out P@1 of each teacher among all students at the prefix dims")
    e.add_argument("--train-query", action="store_true", help="let the query map move from the teacher's principal components")
    e.add_argument("--epochs", type=int, default=20)
    e.add_argument("--batch", type=int, default=512, help="propositions per batch (whole sentences)")
    e.add_argument("--lr", type=float, default=1e-3)
    e.add_argument("--cache", type=Path, help="folder for the frozen features (reused when the inputs match)")
    e.add_argument("--context", choices=("sentence", "passage"), default="sentence",
                   help="what the backbone reads in one pass, as the encoder will (`proposition:context=passage`)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default="auto")
    e.set_defaults(run=_proposition)

    n = tsub.add_parser("nugget", help="nugget scorer, feedback, W^V and adapters by autoencoding Wikipedia")
    n.add_argument("--wiki", type=Path, default=Path(WIKI_EXTRACTED), help="WikiExtractor folder (wiki_00..69 train, 70..99 held out)")
    n.add_argument("--out", type=Path, default=WEIGHTS / "nugget-ae")
    n.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    n.add_argument("--layer", type=int, default=3, help="scorer reads the states after this layer; layers below stay frozen")
    n.add_argument("--ratios", default="0.05,0.1,0.25", help="compression ratios r, one per step in turn")
    n.add_argument("--ratio", type=float, default=0.25, help="the default r recorded for indexing")
    n.add_argument("--lora", type=int, default=8, help="LoRA rank on the layers above --layer")
    n.add_argument("--decoder-layers", type=int, default=2)
    n.add_argument("--steps", type=int, default=700)
    n.add_argument("--batch", type=int, default=16)
    n.add_argument("--lr", type=float, default=5e-4)
    n.add_argument("--negatives", type=int, default=2048, help="sampled-softmax negatives (0: full vocabulary)")
    n.add_argument("--seed", type=int, default=0)
    n.add_argument("--device", default="auto")
    n.set_defaults(run=_nugget)

    f = tsub.add_parser("idf", help="word-piece IDF table over Wikipedia's training split (tokens:keep=idf)")
    f.add_argument("--wiki", type=Path, default=Path(WIKI_EXTRACTED), help="WikiExtractor folder (wiki_00..69 are read)")
    f.add_argument("--out", type=Path, default=WEIGHTS / "idf")
    f.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    f.set_defaults(run=_idf)

    d = tsub.add_parser("docsplit", help="DocSplit contrastive stage (halves of a document are positives) for nugget or single")
    d.add_argument("--encoder", choices=("nugget", "single"), default="nugget")
    d.add_argument("--init", type=Path, default=WEIGHTS / "nugget-ae", help="nugget weights to start from (nugget only)")
    d.add_argument("--wiki", type=Path, default=Path(WIKI_EXTRACTED), help="WikiExtractor folder (train files only are read)")
    d.add_argument("--out", type=Path, help="default: encoders/weights/nugget (nugget), encoders/weights/single-docsplit (single)")
    d.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    d.add_argument("--lora", type=int, default=8, help="rank of the new adapters")
    d.add_argument("--steps", type=int, default=200)
    d.add_argument("--batch", type=int, default=16)
    d.add_argument("--lr", type=float, default=2e-4)
    d.add_argument("--tau", type=float, default=0.05)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default="auto")
    d.set_defaults(run=_docsplit)

    c = tsub.add_parser("crossthought", help="Cross-Thought slots reading the frozen backbone, cross-sequence layer, masked-word head, on Wikipedia")
    c.add_argument("--slots", type=int, default=5, help="N special-token slots per sequence")
    c.add_argument("--control", action="store_true", help="the control: same budget, no cross layer (masked LM on short sequences)")
    c.add_argument("--wiki", type=Path, default=Path(WIKI_EXTRACTED), help="WikiExtractor folder (wiki_00..69 train, 70..99 held out)")
    c.add_argument("--out", type=Path, help="default: encoders/weights/crossthought-N (control: crossthought-mlm-N)")
    c.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    c.add_argument("--length", type=int, default=64, help="tokens per short sequence")
    c.add_argument("--steps", type=int, default=400)
    c.add_argument("--batch", type=int, default=64, help="sequences per sample (the cross layer mixes them all)")
    c.add_argument("--per-run", type=int, default=8, help="at most this many consecutive sequences of one section per run")
    c.add_argument("--lr", type=float, default=5e-4)
    c.add_argument("--rank", type=int, default=16, help="rank of the adapters on the slots' own path through the frozen layers (0: none)")
    c.add_argument("--distill", type=float, default=1.0, help="weight of the listwise distillation of the backbone's similarities (0: masked LM alone)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--device", default="auto")
    c.set_defaults(run=_crossthought)

    h = tsub.add_parser("hashing", help="contrastive hashing heads (one a bit) over a frozen encoder's vectors, for store=binary")
    h.add_argument("--encoder", default="tokens", help="the encoder whose vectors are hashed (tokens, nugget, proposition, single)")
    h.add_argument("--bits", type=int, default=256, help="bits a code (a multiple of 8)")
    h.add_argument("--wiki", type=Path, default=Path(WIKI_EXTRACTED), help="WikiExtractor folder (wiki_00..69 train, 70..99 held out)")
    h.add_argument("--out", type=Path, help="default: encoders/weights/hashing-<encoder>-<bits>, which store=binary reads")
    h.add_argument("--backbone", help="default: the packaged all-MiniLM-L6-v2")
    h.add_argument("--documents", type=int, default=2000, help="training documents (a few sentences of a section each)")
    h.add_argument("--heldout", type=int, default=200, help="held-out documents the neighbour recall is measured on")
    h.add_argument("--steps", type=int, default=600)
    h.add_argument("--batch", type=int, default=2048, help="units a step")
    h.add_argument("--lr", type=float, default=1e-4)
    h.add_argument("--tau", type=float, default=0.1, help="L_max temperature")
    h.add_argument("--lmax-weight", type=float, default=0.1, help="weight of the paper's L_max over two views (0: none)")
    h.add_argument("--rank-weight", type=float, default=1.0, help="weight of the listwise ranking term (0: L_max alone)")
    h.add_argument("--init", choices=("itq", "random"), default="itq", help="heads start from ITQ's map of the training vectors, or at random")
    h.add_argument("--positive", type=float, default=0.9, help="indexed vectors at least this close are positives too")
    h.add_argument("--mask-rate", type=float, default=0.15, help="share of word pieces a view replaces by [MASK]")
    h.add_argument("--cache", type=Path, help="folder for the encoded views (reused when the inputs match)")
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--device", default="auto")
    h.set_defaults(run=_hashing)


def _segmenter(args) -> int:
    from .segmenter import train_segmenter

    train_segmenter(args.propsegment, args.out, backbone=args.backbone, epochs=args.epochs, lr=args.lr, seed=args.seed, device=args.device)
    return 0


def _proposition(args) -> int:
    from .proposition import train_proposition

    train_proposition(
        args.wiki, args.out, sentences=args.sentences, heldout=args.heldout, backbone=args.backbone, out_dim=args.dim, prefix=args.prefix,
        sentence_weight=args.sentence_weight,
        hidden=args.hidden, layers=tuple(int(x) for x in args.layers.split(",")), tau=args.tau,
        relational_weight=args.relational_weight, nce_weight=args.nce_weight, nce_both=args.nce_both, select=args.select, train_query=args.train_query, epochs=args.epochs, batch=args.batch,
        lr=args.lr, cache=args.cache, seed=args.seed, device=args.device, context=args.context,
    )
    return 0


def _nugget(args) -> int:
    from .nugget import train_nugget

    train_nugget(
        args.out, wiki=args.wiki, backbone=args.backbone, layer=args.layer, ratios=tuple(float(r) for r in args.ratios.split(",")),
        ratio=args.ratio, lora=args.lora, decoder_layers=args.decoder_layers, steps=args.steps, batch=args.batch, lr=args.lr,
        negatives=args.negatives or None, seed=args.seed, device=args.device,
    )
    return 0


def _docsplit(args) -> int:
    from .docsplit import run_docsplit

    out = args.out or WEIGHTS / ("nugget" if args.encoder == "nugget" else "single-docsplit")
    run_docsplit(
        args.encoder, out, init=args.init if args.encoder == "nugget" else None, wiki=args.wiki, backbone=args.backbone,
        lora=args.lora, steps=args.steps, batch=args.batch, lr=args.lr, tau=args.tau, seed=args.seed, device=args.device,
    )
    return 0


def _crossthought(args) -> int:
    from .crossthought import train_crossthought

    out = args.out or WEIGHTS / (f"crossthought-mlm-{args.slots}" if args.control else f"crossthought-{args.slots}")
    train_crossthought(
        out, wiki=args.wiki, backbone=args.backbone, slots=args.slots, control=args.control, length=args.length,
        steps=args.steps, batch=args.batch, run=args.per_run, lr=args.lr, distill=args.distill, rank=args.rank, seed=args.seed, device=args.device,
    )
    return 0


def _idf(args) -> int:
    from .idf import train_idf

    config = train_idf(args.wiki, args.out, args.backbone)
    print(f"IDF over {config['documents']} sections, {config['vocab']} word-pieces, {config['seconds']} s -> {args.out}")
    return 0


def _hashing(args) -> int:
    from ..hashing import check_bits, learned_name
    from .hashing import train_hashing

    check_bits(args.bits)
    train_hashing(
        args.encoder, args.bits, args.out or WEIGHTS / learned_name(args.encoder, args.bits), wiki=args.wiki, backbone=args.backbone,
        documents=args.documents, heldout=args.heldout, steps=args.steps, batch=args.batch, lr=args.lr, tau=args.tau,
        lmax_weight=args.lmax_weight, rank_weight=args.rank_weight, init=args.init, positive=args.positive, mask_rate=args.mask_rate, seed=args.seed, device=args.device,
        cache=args.cache,
    )
    return 0
