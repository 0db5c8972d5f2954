//! The export-time code of the `fs` and `mitogen` modules: file contents and their hash,
//! the mitogen context of a resource (`via`), and the `dir_before_file` dependency manager.

use std::collections::HashMap;
use std::sync::Arc;

use sha1::{Digest, Sha1};
use weft_ir::ErrorKind;
use weft_ir::span::Location;
use weft_ir::value::Value;

use super::{Exporter, Model, Read, Stop, error_at};

pub(crate) fn sha1_hex(content: &[u8]) -> String {
    Sha1::digest(content).iter().map(|b| format!("{b:02x}")).collect()
}

/// `fs::File`'s content as `store_file` computes it (prefix content first), or `None` when
/// the content is a reference or Unknown.
pub(crate) fn file_content(model: &Model, instance: u32, location: Option<Location>) -> Result<Option<String>, Stop> {
    let content = match model.read(instance, "content") {
        Read::Value(Value::Str(s)) => s.to_string(),
        Read::Value(Value::Reference(_) | Value::Unknown) => return Ok(None),
        Read::Value(other) => model.display(&other),
        Read::Missing | Read::NoValue => return Ok(None),
    };
    let separator = match model.read(instance, "content_separator") {
        Read::Value(Value::Str(s)) => s.to_string(),
        _ => "\n".to_string(),
    };
    let prefix = content_blocks(model, instance, "prefix_content");
    let suffix = content_blocks(model, instance, "suffix_content");
    let mut content = content;
    if !prefix.is_empty() {
        content = format!("{}{separator}{content}", prefix.join(&separator));
    }
    if !suffix.is_empty() {
        // fs 1.2.0 reads `obj.content_seperator` here, an attribute no entity has, so every
        // file with suffix content fails to export in the reference; weft fails the same way
        // instead of exporting a file the reference never would.
        return Err(Stop::Error(error_at(
            ErrorKind::ExternalException,
            "Failed to get attribute 'hash' for export on 'fs::File': the fs module (1.2.0) cannot export \
             suffix_content (it reads the misspelled attribute `content_seperator`)"
                .to_string(),
            location,
        )));
    }
    Ok(Some(content))
}

/// The values of a file's `fs::Content` blocks, sorted by sorting key (or value).
fn content_blocks(model: &Model, instance: u32, relation: &str) -> Vec<String> {
    let Read::Value(Value::List(blocks)) = model.read(instance, relation) else { return Vec::new() };
    let mut keyed: Vec<(String, String)> = blocks
        .iter()
        .filter_map(|block| {
            let Value::Instance(b) = block else { return None };
            let value = match model.read(*b, "value") {
                Read::Value(v) => model.display(&v),
                _ => return None,
            };
            let key = match model.read(*b, "sorting_key") {
                Read::Value(Value::Null(_)) | Read::NoValue | Read::Missing => value.clone(),
                Read::Value(v) => model.display(&v),
            };
            Some((key, value))
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, value)| value).collect()
}

fn dict(entries: Vec<(&str, Value)>) -> Value {
    Value::Dict(entries.into_iter().map(|(k, v)| (Arc::from(k), v)).collect::<Vec<_>>().into())
}

/// mitogen's `get_resource_context`: the resource's own `via` context, else its host's, else
/// an ssh context built from the host's address (wrapped in sudo for a non-root user). The
/// error is the reason, in the module's words.
pub(crate) fn via_context(model: &Model, instance: u32) -> Result<Value, String> {
    if let Read::Value(Value::Instance(via)) = model.read(instance, "via") {
        return serialize_context(model, via, 0);
    }
    let host = match model.read(instance, "host") {
        Read::Value(Value::Instance(host)) => host,
        _ => {
            return Err("NotImplementedError: [No host relation] Cannot serialize a mitogen::Context from the \
                        current entity, it doesn't define any of the expected relations."
                .to_string());
        }
    };
    if !model.is_instance_of(host, "std::Host") {
        return Err("NotImplementedError: [No std::Host entity] Cannot serialize a mitogen::Context from the \
                    current entity, it doesn't define any of the expected relations."
            .to_string());
    }
    if let Read::Value(Value::Instance(via)) = model.read(host, "via") {
        return serialize_context(model, via, 0);
    }
    let attribute = |name: &str| match model.read(host, name) {
        Read::Value(v) => v,
        _ => Value::NULL,
    };
    let ip = attribute("ip");
    if matches!(ip, Value::Null(_)) {
        return Err("NotImplementedError: [No ip] Cannot serialize a mitogen::Context from the current entity, \
                    it doesn't define any of the expected relations."
            .to_string());
    }
    let python = match model.read(host, "os") {
        Read::Value(Value::Instance(os)) => match model.read(os, "python_cmd") {
            Read::Value(Value::Null(_)) | Read::Missing | Read::NoValue => Value::str("python3"),
            Read::Value(cmd) => cmd,
        },
        _ => Value::str("python3"),
    };
    let remote_user = attribute("remote_user");
    let context = dict(vec![
        ("method_name", Value::str("ssh")),
        ("name", attribute("name")),
        ("hostname", ip),
        ("username", remote_user.clone()),
        ("port", attribute("remote_port")),
        ("check_host_keys", Value::str("ignore")),
        (
            "ssh_args",
            Value::List(
                ["-o", "UserKnownHostsFile=/dev/null", "-o", "PasswordAuthentication=no"]
                    .into_iter()
                    .map(Value::str)
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ),
        ("python_path", Value::List(vec![python].into())),
    ]);
    if matches!(&remote_user, Value::Str(s) if &**s == "root") {
        Ok(context)
    } else {
        Ok(dict(vec![("method_name", Value::str("sudo")), ("name", Value::str("")), ("via", context)]))
    }
}

/// mitogen's `serialize_context`: the context's non-null plain attributes, and its own `via`.
fn serialize_context(model: &Model, context: u32, depth: usize) -> Result<Value, String> {
    if depth > 32 {
        return Err("mitogen contexts nested more than 32 deep".to_string());
    }
    let is_context = model.program().entity(model.entity_of(context)).parents.iter().any(|&p| {
        model.program().entity_by_name("mitogen::Context").is_some_and(|c| model.program().is_subclass(p, c))
    });
    if !is_context {
        return Err(format!(
            "ValueError: Cannot serialize instance {}, it is not an instance of mitogen::Context",
            model.display(&Value::Instance(context))
        ));
    }
    let mut entries: Vec<(Arc<str>, Value)> = Vec::new();
    for name in model.plain_attributes(context) {
        if let Read::Value(value) = model.read(context, &name)
            && !matches!(value, Value::Null(_))
        {
            entries.push((Arc::from(name.as_str()), value));
        }
    }
    if let Read::Value(Value::Instance(via)) = model.read(context, "via") {
        entries.push((Arc::from("via"), serialize_context(model, via, depth + 1)?));
    }
    Ok(Value::Dict(entries.into()))
}

/// Python's `os.path.normpath` for POSIX paths.
fn normpath(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let initial = if path.starts_with("//") && !path.starts_with("///") {
        "//"
    } else if path.starts_with('/') {
        "/"
    } else {
        ""
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if initial.is_empty() {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = format!("{initial}{}", parts.join("/"));
    if joined.is_empty() { ".".to_string() } else { joined }
}

/// fs's `dir_before_file`: a file, directory or symlink on a host requires every directory
/// resource on the same host that contains it; a purged directory is instead required by
/// the purged things inside it, and something deployed inside a purged directory is an error.
pub(crate) fn dir_before_file(exporter: &mut Exporter<'_>) -> Result<(), weft_ir::Diagnostic> {
    let model = exporter.model;
    let mut per_host: HashMap<u32, Vec<(String, usize)>> = HashMap::new();
    let mut dirs_per_host: HashMap<u32, Vec<(String, usize)>> = HashMap::new();
    let mut hosts = Vec::new();
    for (index, resource) in exporter.graph.resources.iter().enumerate() {
        let ty = resource.id.entity_type.as_str();
        if !matches!(ty, "fs::File" | "fs::Directory" | "fs::JsonFile" | "fs::Symlink") {
            continue;
        }
        let Read::Value(Value::Instance(host)) = model.read(exporter.instance_of[index], "host") else { continue };
        if !per_host.contains_key(&host) {
            hosts.push(host);
        }
        let field = |name: &str| resource.field(name).and_then(|v| v.as_str().map(normpath));
        let entries = per_host.entry(host).or_default();
        if ty == "fs::Symlink" {
            entries.extend(field("src").map(|p| (p, index)));
            entries.extend(field("dst").map(|p| (p, index)));
        } else {
            entries.extend(field("path").map(|p| (p, index)));
        }
        if ty == "fs::Directory"
            && let Some(path) = field("path")
        {
            dirs_per_host.entry(host).or_default().push((format!("{path}/"), index));
        }
    }
    let purged = |index: usize| exporter.graph.resources[index].fields.value_text("purged") == Some("true");
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for host in hosts {
        let Some(dirs) = dirs_per_host.get(&host) else { continue };
        // The directories by prefix (their path and a `/`), as positions in `dirs`. A path
        // starts with a prefix exactly when the prefix is the path up to one of its `/`s, so
        // each path looks up its own prefixes instead of being compared with every directory
        // of its host (files times directories, as the reference's module does).
        let mut by_prefix: HashMap<&str, Vec<usize>> = HashMap::new();
        for (position, (prefix, _)) in dirs.iter().enumerate() {
            by_prefix.entry(prefix.as_str()).or_default().push(position);
        }
        for (path, file) in &per_host[&host] {
            // The directories containing the path, in the order of `dirs`, which decides the
            // error reported first.
            let mut containing: Vec<usize> =
                path.match_indices('/').filter_map(|(at, _)| by_prefix.get(&path[..=at])).flatten().copied().collect();
            containing.sort_unstable();
            for (_, dir) in containing.into_iter().map(|position| &dirs[position]) {
                if purged(*dir) {
                    if purged(*file) {
                        edges.push((*dir, *file));
                    } else {
                        let resources = &exporter.graph.resources;
                        // Python's `str(Id)` shows the version only when there is one.
                        let show = |i: usize| match exporter.graph.version {
                            0 => resources[i].id.to_string(),
                            v => resources[i].id.with_version(v),
                        };
                        return Err(error_at(
                            ErrorKind::RuntimeError,
                            format!(
                                "Directory {} is purged but a resource is trying to deploy something in it: {}",
                                show(*dir),
                                show(*file)
                            ),
                            model.location_of(exporter.instance_of[*file]),
                        ));
                    }
                } else {
                    edges.push((*file, *dir));
                }
            }
        }
    }
    for (from, to) in edges {
        exporter.graph.resources[from].requires.push(to);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normpath_is_pythons() {
        for (input, expected) in [
            ("/etc//app/./x", "/etc/app/x"),
            ("/etc/app/", "/etc/app"),
            ("/../a", "/a"),
            ("a/../../b", "../b"),
            ("//x", "//x"),
            ("///x", "/x"),
            ("", "."),
        ] {
            assert_eq!(normpath(input), expected, "{input}");
        }
    }
}
