/* Datasets and partitions (DESIGN.md §5).
 *
 * A dataset is one labelled array: the original train and test files are
 * merged (as PFLlib's generators do) and later re-split per client. Pixels
 * stay as bytes in memory (4x smaller than floats) and are scaled to [0,1]
 * and normalized with mean 0.5, std 0.5 when a batch is gathered.
 *
 * Files are looked up under a data directory:
 *   DIR/mnist/   train-images-idx3-ubyte, train-labels-idx1-ubyte,
 *                t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte  (each raw or .gz)
 *   DIR/fmnist/  the same four names (raw or .gz)
 *   DIR/cifar10/ data_batch_1.bin .. data_batch_5.bin, test_batch.bin
 *                (directly there or under cifar-10-batches-bin/)
 *   DIR/cifar100/ train.bin, test.bin (directly there or under cifar-100-binary/);
 *                "cifar100" keeps the fine labels (100 classes),
 *                "cifar100-coarse" the coarse ones (20 superclasses)
 *   DIR/svhn/    train_32x32.mat, test_32x32.mat (cropped digits, MATLAB v5
 *                files read with libmatio); label 10 (digit 0) becomes 0
 *   DIR/tinyimagenet/ the tiny-imagenet-200 folder tree (directly there or
 *                under tiny-imagenet-200/): train then val JPEGs decoded with
 *                libjpeg, grayscale ones replicated to 3 channels
 *   DIR/agnews/  train.csv (optional), test.csv: AG News CSV rows (class 1-4,
 *                title, description); a text dataset, see "text" below
 * and "pfllib:DIR" is a folder PFLlib's generators wrote, clients and all
 * (see "PFLlib folders" below).
 *
 * Every loader fails with a message naming the file and the problem
 * ("mnist: train-images-idx3-ubyte: expected magic 2051, got 0"). */
#ifndef PFL_DATA_DATA_H
#define PFL_DATA_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pfl_text pfl_text;

/* The split a PFLlib folder's config.json records. */
typedef struct {
    char partition[64];   /* its "partition" string, printable ASCII ("" when null, absent or not one) */
    bool partition_null;  /* "partition": null (PFLlib's iid) */
    double alpha;         /* "alpha", NAN when absent or not a number */
    int non_iid, balance; /* 0 or 1, -1 when absent or not a boolean */
} pfl_split_record;

typedef struct {
    char name[16];
    int n;                /* samples */
    int c, h, w;          /* image shape (text: 1 x 1 x max_len tokens) */
    int classes;
    uint8_t *pixels;      /* n x (c*h*w), row-major CHW per sample; NULL for text */
    uint8_t *labels;      /* n, each < classes */
    pfl_text *text;       /* text datasets (agnews) only, else NULL */
    int from_train_files; /* samples 0..from_train_files-1 came from the train files, the rest from the
                           * test files (0 when unknown, e.g. a synthetic dataset); the partitions
                           * that keep the files' split (dirc, cfr) need it */
    char provenance[200]; /* what the files are, when pfl knows them (pfl_known_files), else "" */
    char warning[400];    /* a known file that differs from its official copy, else "" */
    float *features;      /* n x (c*h*w) floats gathered as they are (a PFLlib folder's x), else NULL */
    int own_clients;      /* a PFLlib folder: its clients, whose samples lie client after client, each its
                           * train samples then its test samples (the partition "pfllib"); else 0 */
    int *own_counts;      /* own_clients x 2: each client's train count, then its test count */
    /* a PFLlib folder: the split its config.json records, which a re-export
     * of that split (pfl partition --export pfllib) writes back as it was */
    pfl_split_record own_split;
} pfl_dataset;

/* Names accepted by pfl_dataset_load, for --help and error messages. */
extern const char *const pfl_dataset_names;

/* Loads dataset `name` (see pfl_dataset_names) from data_dir, train
 * files first then test files; "pfllib:DIR" reads the PFLlib folder DIR
 * (below; data_dir does not apply). Returns 0, or -1 with a message. */
int pfl_dataset_load(pfl_dataset *d, const char *name, const char *data_dir);
void pfl_dataset_free(pfl_dataset *d);
/* SHA-256 of what was loaded: the shape, the labels and every sample's
 * content (pixels, a PFLlib folder's floats, text's token ids), so a
 * checkpoint binds the data its run trained on and a summary names it. */
void pfl_dataset_digest(const pfl_dataset *d, uint8_t digest[32]);

static inline long pfl_dataset_sample_size(const pfl_dataset *d) { return (long)d->c * d->h * d->w; }

/* Copies samples idx[0..n) into x (n x sample size floats, normalized:
 * (p/255 - 0.5)/0.5; text: token ids, see below) and y (n labels). */
void pfl_dataset_gather(const pfl_dataset *d, const int *idx, int n, float *x, uint8_t *y);

/* ---- file readers (exposed for tests) ---- */

/* Reads an IDX file, raw or gzip'd (detected by content, not name).
 * expect_magic is 2051 (images, 3 dims) or 2049 (labels, 1 dim). On success
 * *data is malloc'd (caller frees), *count is the item count and, for
 * images, *rows and *cols the size. `what` prefixes messages ("mnist"). */
int pfl_idx_read(const char *path, const char *what, int expect_magic, uint8_t **data, int *count, int *rows,
                 int *cols);

/* Reads one CIFAR-10 binary batch file (records of 1 label byte + 3072
 * pixel bytes) and appends its records to pixels/labels at position *n,
 * which must have room for `capacity` records. Labels >= 10 are rejected. */
int pfl_cifar10_read(const char *path, uint8_t *pixels, uint8_t *labels, int *n, int capacity);

/* Reads a CIFAR-100 binary file (records of coarse label, fine label, 3072
 * pixel bytes) like pfl_cifar10_read, keeping the coarse labels when
 * `coarse` is nonzero, else the fine ones. Coarse >= 20 or fine >= 100 is
 * rejected. */
int pfl_cifar100_read(const char *path, int coarse, uint8_t *pixels, uint8_t *labels, int *n, int capacity);

/* Reads an SVHN cropped-digits .mat file (X: uint8 32x32x3xN column-major,
 * y: Nx1 labels 1..10) into malloc'd CHW pixels and labels 0..9 (10 -> 0).
 * On failure *pixels and *labels are NULL. Fails with a clear message when
 * pfl was built without libmatio. */
int pfl_svhn_read(const char *path, uint8_t **pixels, uint8_t **labels, int *n);

/* Decodes a 64x64 JPEG file into out (3x64x64 CHW bytes); grayscale is
 * replicated to 3 channels; other sizes and corrupt data (libjpeg warnings
 * included) are rejected. Fails clearly when built without libjpeg. */
int pfl_jpeg_decode64(const char *path, uint8_t *out);

/* Compares the n files a dataset was just loaded from with the official
 * ones pfl knows by MD5 (MNIST, Fashion-MNIST, CIFAR-10, CIFAR-100, SVHN;
 * src/data/known.c says where each checksum comes from) and with the
 * project's rebuilt CIFAR-10, and says what it found in d->provenance ("the
 * official files (md5 verified)", or that they are the rebuilt CIFAR-10)
 * or, for a file that differs, in d->warning (its name, its md5 or size and
 * the official one). Never fails: files it does not know leave both empty.
 * Verdicts are cached by file identity and times (known.c), so a file is
 * hashed once, not on every load. */
void pfl_known_files(pfl_dataset *d, const char *dataset, const char *const *paths, int n);

/* Loaders behind pfl_dataset_load (exposed for tests). */
int pfl_cifar100_load(pfl_dataset *d, const char *dir, int coarse);
int pfl_svhn_load(pfl_dataset *d, const char *dir);
int pfl_tinyimagenet_load(pfl_dataset *d, const char *dir);

/* ---- text (AG News) ----
 *
 * A text dataset keeps each sample's whole token sequence (CSR: offsets and
 * one token array) and a sample is gathered as max_len floats: its first
 * max_len token ids, then 0 (padding) up to max_len. Ids travel as floats
 * because every batch in pfl does (workspace input, gather, all methods and
 * modules); a float32 holds every integer below 2^24 exactly, and
 * vocabularies are capped there.
 *
 * Tokenizer: ASCII letters are lowercased and a token is a maximal run of
 * ASCII letters and digits; every other byte (spaces, punctuation,
 * apostrophes, the backslashes AG News leaves for line breaks, bytes >= 0x80)
 * separates tokens. "It's U.S. #39;E-mail\team" gives it, s, u, s, 39, e,
 * mail, team. A row's text is its title, then its description.
 *
 * The vocabulary comes after the partition, from the training clients' text
 * only: loading gives every distinct word a provisional id (first
 * appearance order), and pfl_text_build_vocab counts the tokens of every
 * client's TRAIN split (not the test splits, not samples no client holds),
 * orders words by count, most frequent first, ties broken by byte order of
 * the word (strcmp), keeps the first vocab_size - 2 and rewrites every
 * sample's tokens to the final ids:
 *     0 <pad>   1 <unk> (a word outside the vocabulary)   2.. words.
 * Until then the dataset cannot be trained on (pfl_fl_create refuses it). */

#define PFL_TEXT_MAX_LEN 200      /* PFLlib's max_len for AG News */
#define PFL_TEXT_PAD 0
#define PFL_TEXT_UNK 1
#define PFL_TEXT_MAX_VOCAB (1 << 24) /* ids stay exact as float32 */

struct pfl_text {
    int max_len;          /* tokens per gathered sample */
    int vocab_size;       /* ids are < vocab_size once built; 0 before */
    int num_words;        /* distinct words in the files (provisional ids) */
    int vocab_words;      /* words that got an id of their own (<= vocab_size - 2) */
    long long *offsets;   /* n + 1: sample i is tokens[offsets[i] .. offsets[i+1]), untruncated */
    int32_t *tokens;      /* provisional ids before the vocabulary, final ids after */
    char *pool;           /* the distinct words, NUL-terminated, one after another */
    long long *word_at;   /* num_words: offset of word w in pool */
    int32_t *id_word;     /* vocab_size: the provisional word of each final id (-1: pad, unk, unused) */
    int given_ids;        /* the ids are final as read (a PFLlib folder): no words, and building the
                           * vocabulary only checks that every id is below its size */
};

/* Reads DIR/agnews/train.csv when present, then DIR/agnews/test.csv
 * (loader behind pfl_dataset_load, exposed for tests). Rows are RFC 4180 CSV:
 * three fields, each quoted or not, "" inside quotes is a quote, newlines
 * may sit inside quotes; CRLF line ends and blank lines are accepted. A
 * malformed row (unterminated quote, text after a closing quote, a quote in
 * an unquoted field, a field count other than 3, a class index other than
 * 1-4) fails naming the file and line: "agnews: DIR/agnews/test.csv:12: ...". */
int pfl_agnews_load(pfl_dataset *d, const char *dir);

/* Frees a text dataset's tokens and words (pfl_dataset_free calls it). */
void pfl_text_free(pfl_text *t);

/* pfl_dataset_gather for text: max_len token ids per sample as floats,
 * truncated, then padded with 0. */
void pfl_text_gather(const pfl_dataset *d, const int *idx, int n, float *x, uint8_t *y);

/* The word of final id `id` ("<pad>", "<unk>", "" for an unused id), or of
 * provisional id `id` before the vocabulary is built; "" for every id of a
 * PFLlib folder (its words are not in it). NULL when out of range. */
const char *pfl_text_word(const pfl_dataset *d, int id);

/* ---- partitions ---- */

typedef enum {
    PFL_PART_IID,
    PFL_PART_PAT,
    PFL_PART_DIR,      /* PFLlib's per-class Dirichlet: each class's samples spread over the clients */
    PFL_PART_ONELABEL, /* FedALP's MNIST/FMNIST split: one class and fixed train/test counts per client */
    PFL_PART_CFR,      /* pFedCFR's split: Ditto's generator, labels (client + t) mod classes, lognormal sizes */
    PFL_PART_SHARDS,   /* FedAvg's shards (McMahan et al.): sorted by label, K equal shards per client */
    PFL_PART_DIRC,     /* FedALP's CIFAR-10 split (Fraboni et al.): each client's class mix drawn from Dir(A) */
    PFL_PART_PFLLIB    /* a PFLlib folder's own clients, as its files hold them (the only scheme for one) */
} pfl_partition_kind;

/* The accepted --partition forms, for flag help. */
extern const char *const pfl_partition_forms;

typedef struct {
    pfl_partition_kind kind;
    int classes_per_client;   /* pat:K (default 2) and cfr:K (default 5, Ditto's) */
    int shards_per_client;    /* shards:K, default 2 */
    double alpha;             /* dir:A and dirc:A, default 0.1 */
    int min_samples;          /* dir:A:MIN, least samples per client; PFLlib's batch/(1-train) = 40 */
    int train_per_client;     /* onelabel:TRAIN/TEST, default 500 (FedALP) */
    int test_per_client;      /* onelabel:TRAIN/TEST, default 100 (FedALP) */
    double train_fraction;    /* per-client train share, default 0.75 */
    int max_tries;            /* dir: bounded retries before giving up, default 100 */
    int holdout;              /* FedTSDP: the dataset's last `holdout` samples go to no client (the
                               * server's public set); the scheme partitions the first n - holdout. Default 0 */
} pfl_partition_spec;

/* Parses "iid", "pat", "pat:K", "dir", "dir:A", "dir:A:MIN", "onelabel",
 * "onelabel:TRAIN/TEST", "cfr", "cfr:K", "shards", "shards:K", "dirc",
 * "dirc:A" and fills defaults. */
int pfl_partition_parse(pfl_partition_spec *spec, const char *text);

/* The --partition a run on `data` takes: "pfllib" (the folder's own
 * clients) for a PFLlib folder (--data pfllib:DIR) where the default "pat"
 * stands, else `partition` as given. */
const char *pfl_partition_resolve(const char *data, const char *partition);

/* One line saying what the scheme does with this dataset and client count
 * (shard sizes, size tiers, ...), for `pfl partition`. Returns buf. */
const char *pfl_partition_describe(const pfl_partition_spec *spec, const pfl_dataset *d, int num_clients, char *buf,
                                   size_t size);

typedef struct {
    int n_train, n_test;
    int *train, *test;        /* indices into the dataset; point into the partition's storage */
} pfl_client_data;

typedef struct {
    int num_clients;
    pfl_client_data *clients;
    int *storage;             /* one allocation for every index list */
} pfl_partition;

/* Splits the dataset over num_clients clients, then each client's samples
 * 75/25 (train_fraction) into train and test (onelabel instead gives every
 * client exactly train_per_client / test_per_client; dirc and cfr draw train
 * samples from the train files and test samples from the test files, as
 * their generators do), drawing only from streams keyed by seed (a pure
 * function of dataset, spec, clients and seed). iid, pat, dir, onelabel and
 * shards give each sample to at most one client; dirc draws with replacement
 * and cfr starts a class over when it runs out, so there a sample can recur
 * (within a client's train or test list, or across clients, never between a
 * client's train and test lists).
 * Always terminates: returns -1 with a message saying why and what to change
 * when the spec cannot be met (e.g. more clients than samples, a Dirichlet
 * minimum not met within max_tries). */
int pfl_partition_make(pfl_partition *p, const pfl_dataset *d, const pfl_partition_spec *spec, int num_clients,
                       uint64_t seed);
void pfl_partition_free(pfl_partition *p);

/* Text: builds the vocabulary of a text dataset from the training splits of p's
 * clients (see above) and rewrites every sample's tokens to its ids; for a
 * PFLlib folder's final ids (given_ids), checks that each is below vocab_size.
 * vocab_size counts <pad> and <unk>: 2 < vocab_size <= PFL_TEXT_MAX_VOCAB.
 * Fails on an image dataset or when the vocabulary is already built. */
int pfl_text_build_vocab(pfl_dataset *d, const pfl_partition *p, int vocab_size);

/* ---- PFLlib folders (pfllib.c reads and writes them; npz.c, pickle.c read a client's file) ----
 *
 * A PFLlib generator (dataset/generate_*.py) writes DIR/config.json
 * (num_clients, num_classes, the partition, per-client label counts) and,
 * for each client i < num_clients, DIR/train/<i>.npz and DIR/test/<i>.npz:
 * np.savez_compressed(f, data={'x': X, 'y': Y}), a zip (deflated; np.savez
 * stores) holding one data.npy whose header says a 0-d object array
 * ('descr': '|O', 'shape': ()): a Python pickle of numpy's reconstruction
 * of that dict. That pickle is read by a strict machine that executes
 * nothing: it knows the opcodes numpy's pickles of this shape use (protocol
 * 2 to 4) and three globals, numpy's _reconstruct (numpy.core.multiarray, or
 * numpy._core.multiarray as NumPy 2 writes it), ndarray and dtype; any other
 * opcode or global is refused in one line. Arrays are C order, little-endian
 * float32, float64, int64, int32 or uint8; object arrays hold PFLlib's text
 * rows only. Every length is checked against the bytes there before
 * anything is allocated, and the machine grows only with the opcodes it
 * reads, so memory stays within a fixed multiple of the file.
 *
 * What the samples become:
 *   images  x float32 N x C x H x W (N x H x W: one channel; N x F: 1 x 1 x F),
 *           already normalized by PFLlib's transforms, kept as floats and
 *           gathered as they are (float64 rounded to float32 and integer
 *           pixels taken as their values, as torch.Tensor(x).float() does)
 *   text    x an object array of N rows (token list, length) (AG News), or
 *           an integer N x L array (Shakespeare): token ids < 2^24 that are
 *           final (text.given_ids; PFLlib's vocabulary, <pad> 0 as pfl's)
 *   labels  y integers in [0, num_classes), num_classes <= 256; a config.json
 *           without num_classes (older PFLlib) gets the largest label + 1
 * The dataset keeps PFLlib's client order, each client's train samples then
 * its test samples (own_clients, own_counts); the partition "pfllib" is
 * exactly those clients, and every other scheme is refused for it. */

/* A numeric array of a client's file: count elements of `type`,
 * little-endian, C order, at data (unaligned: read with memcpy). */
typedef enum { PFL_NPY_F4, PFL_NPY_F8, PFL_NPY_I8, PFL_NPY_I4, PFL_NPY_U1 } pfl_npy_type;
#define PFL_NPY_MAX_DIMS 4
typedef struct {
    pfl_npy_type type;
    int ndim;                          /* 1..PFL_NPY_MAX_DIMS */
    long long shape[PFL_NPY_MAX_DIMS];
    long long count;                   /* the product of shape */
    const uint8_t *data;
} pfl_npy_array;

/* One client's file: y, and either x (a numeric array) or text rows. */
typedef struct {
    pfl_npy_array x, y;   /* x.ndim 0 when x held text rows */
    long long rows, row_len; /* text rows: each row_len token ids (PFLlib pads them to one length) */
    int64_t *tokens;      /* rows x row_len, as the file holds them */
    int64_t *lengths;     /* rows: the length each row names */
    void *owned;          /* the file's bytes, which x and y point into */
} pfl_npz_xy;

/* Reads one client's file (train/<i>.npz). On failure out is empty and the
 * message is "WHAT: PATH: FIELD: problem" (FIELD: the zip, data.npy, the
 * pickle, x, y). */
int pfl_npz_read_xy(const char *path, const char *what, pfl_npz_xy *out);
void pfl_npz_xy_free(pfl_npz_xy *xy);

/* Loader behind pfl_dataset_load("pfllib:DIR") (exposed for tests):
 * config.json, then each client's train and test file. Every refusal is
 * one line naming the file and the field ("pfllib: DIR/train/3.npz: y: label
 * 12 at sample 40 is outside num_classes 10 (config.json)"). */
int pfl_pfllib_load(pfl_dataset *d, const char *dir);
/* The clients a PFLlib folder holds (config.json's num_clients), read and
 * checked as pfl_pfllib_load reads it: what --clients means when not given
 * with --data pfllib:DIR. 0, or -1 with a message. */
int pfl_pfllib_clients(const char *dir, int *clients);

/* Writes p's clients of d as a PFLlib folder DIR (created; refused when it
 * exists and is not empty): config.json with PFLlib's keys (num_clients,
 * num_classes, non_iid, balance, partition, "Size of samples for labels in
 * clients", alpha, batch_size) and `about` (how pfl made the split), and
 * each client's train/<i>.npz and test/<i>.npz as np.savez_compressed
 * writes them (deflated zip, numpy's protocol-3 pickle), with x as pfl
 * gathers the samples: float32 N x C x H x W images, or, for text (its
 * vocabulary built), rows (token list, length) of max_len ids. The folder
 * is written beside DIR and renamed into place: a failure leaves nothing.
 * `partition` is the scheme's text (config.json's partition); alpha, when
 * not NAN (dir and dirc only: no other split has one). A PFLlib folder's own
 * split (`partition` "pfllib") writes back what its config.json recorded
 * (d->own_split): its partition, alpha, non_iid and balance, nothing made
 * up. 0, or -1 with a message naming the file. */
int pfl_pfllib_export(const pfl_dataset *d, const pfl_partition *p, const char *partition, double alpha,
                      const char *about, const char *dir);

#endif
