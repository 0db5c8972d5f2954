//! IP addresses, interfaces and networks as Python's `ipaddress` module parses and prints
//! them (used by `validate_type` and the std network plugins).

/// An address: IPv4 (32 bits) or IPv6 (128 bits, with an optional scope id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Addr {
    V4(u32),
    V6(u128, Option<String>),
}

impl Addr {
    pub(crate) fn bits(&self) -> u32 {
        match self {
            Addr::V4(_) => 32,
            Addr::V6(..) => 128,
        }
    }

    pub(crate) fn value(&self) -> u128 {
        match self {
            Addr::V4(v) => *v as u128,
            Addr::V6(v, _) => *v,
        }
    }

    pub(crate) fn with_value(&self, value: u128) -> Addr {
        match self {
            Addr::V4(_) => Addr::V4(value as u32),
            Addr::V6(..) => Addr::V6(value, None),
        }
    }

    fn max(&self) -> u128 {
        match self {
            Addr::V4(_) => u32::MAX as u128,
            Addr::V6(..) => u128::MAX,
        }
    }

    pub(crate) fn netmask(&self, prefix: u32) -> u128 {
        if prefix == 0 { 0 } else { self.max() & !((1u128 << (self.bits() - prefix)).wrapping_sub(1)) }
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::V4(v) => {
                let b = v.to_be_bytes();
                write!(f, "{}.{}.{}.{}", b[0], b[1], b[2], b[3])
            }
            Addr::V6(v, scope) => {
                let hextets: Vec<u16> = (0..8).map(|i| (v >> (112 - 16 * i)) as u16).collect();
                // The longest run of zero hextets (at least two), leftmost on ties.
                let (mut best_start, mut best_len) = (usize::MAX, 0);
                let mut i = 0;
                while i < 8 {
                    if hextets[i] == 0 {
                        let start = i;
                        while i < 8 && hextets[i] == 0 {
                            i += 1;
                        }
                        if i - start > best_len {
                            best_start = start;
                            best_len = i - start;
                        }
                    } else {
                        i += 1;
                    }
                }
                let part = |range: std::ops::Range<usize>| {
                    hextets[range].iter().map(|h| format!("{h:x}")).collect::<Vec<_>>().join(":")
                };
                if best_len > 1 {
                    write!(f, "{}::{}", part(0..best_start), part(best_start + best_len..8))?;
                } else {
                    write!(f, "{}", part(0..8))?;
                }
                if let Some(scope) = scope {
                    write!(f, "%{scope}")?;
                }
                Ok(())
            }
        }
    }
}

/// `IPv4Address(text)`: four decimal octets, no leading zeros.
pub(crate) fn parse_v4(text: &str) -> Option<u32> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut value = 0u32;
    for part in parts {
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if part.len() > 1 && part.starts_with('0') {
            return None;
        }
        let octet: u32 = part.parse().ok()?;
        if octet > 255 {
            return None;
        }
        value = (value << 8) | octet;
    }
    Some(value)
}

/// `IPv6Address(text)`, Python's algorithm: an optional `%scope`, at most one `::`, an
/// embedded IPv4 address at the end.
pub(crate) fn parse_v6(text: &str) -> Option<(u128, Option<String>)> {
    let (addr, scope) = match text.split_once('%') {
        Some((a, s)) => {
            if s.is_empty() || s.contains('%') || s.contains('/') {
                return None;
            }
            (a, Some(s.to_string()))
        }
        None => (text, None),
    };
    let mut parts: Vec<String> = addr.split(':').map(str::to_string).collect();
    if parts.len() < 3 {
        return None;
    }
    if parts.last().is_some_and(|p| p.contains('.')) {
        let v4 = parse_v4(parts.last()?)?;
        parts.pop();
        parts.push(format!("{:x}", v4 >> 16));
        parts.push(format!("{:x}", v4 & 0xffff));
    }
    if parts.len() > 9 {
        return None;
    }
    let skip_index: Vec<usize> = (1..parts.len() - 1).filter(|&i| parts[i].is_empty()).collect();
    if skip_index.len() > 1 {
        return None;
    }
    let (parts_hi, parts_lo, skipped) = if let Some(&skip) = skip_index.first() {
        let mut hi = skip;
        let mut lo = parts.len() - skip - 1;
        if parts[0].is_empty() {
            hi -= 1;
            if hi != 0 {
                return None;
            }
        }
        if parts.last().is_some_and(String::is_empty) {
            lo -= 1;
            if lo != 0 {
                return None;
            }
        }
        let skipped = 8i32 - (hi + lo) as i32;
        if skipped < 1 {
            return None;
        }
        (hi, lo, skipped as usize)
    } else {
        if parts.len() != 8 {
            return None;
        }
        if parts[0].is_empty() || parts.last().is_some_and(String::is_empty) {
            return None;
        }
        (parts.len(), 0, 0)
    };
    let hextet = |p: &str| -> Option<u128> {
        if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(p, 16).ok()
    };
    let mut value = 0u128;
    for p in &parts[..parts_hi] {
        value = (value << 16) | hextet(p)?;
    }
    value = value.checked_shl(16 * skipped as u32).unwrap_or(0);
    for p in &parts[parts.len() - parts_lo..] {
        value = (value << 16) | hextet(p)?;
    }
    Some((value, scope))
}

pub(crate) fn parse_addr(text: &str, v4: bool, v6: bool) -> Option<Addr> {
    if v4 && let Some(a) = parse_v4(text) {
        return Some(Addr::V4(a));
    }
    if v6 && let Some((a, scope)) = parse_v6(text) {
        return Some(Addr::V6(a, scope));
    }
    None
}

/// A decimal prefix length (`"24"`, also `"024"`), at most `bits`.
fn parse_prefix_digits(text: &str, bits: u32) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u32 = text.trim_start_matches('0').parse().unwrap_or(0);
    (text.len() <= 10 && prefix <= bits).then_some(prefix)
}

/// The prefix length of a contiguous netmask value.
fn prefix_from_mask(mask: u32) -> Option<u32> {
    let ones = mask.leading_ones();
    (mask.checked_shl(ones).unwrap_or(0) == 0).then_some(ones)
}

/// `addr[/prefix]` as `IPv4Interface`/`IPv6Interface` (and networks) read it: for IPv4 the
/// prefix may also be a netmask or a host mask.
pub(crate) fn parse_with_prefix(text: &str, v4: bool, v6: bool) -> Option<(Addr, u32)> {
    let (addr_text, prefix_text) = match text.split_once('/') {
        Some((a, p)) => {
            if p.contains('/') {
                return None;
            }
            (a, Some(p))
        }
        None => (text, None),
    };
    if v4 && let Some(a) = parse_v4(addr_text) {
        let prefix = match prefix_text {
            None => 32,
            Some(p) => match parse_prefix_digits(p, 32) {
                Some(n) => n,
                None => {
                    let mask = parse_v4(p)?;
                    match prefix_from_mask(mask) {
                        Some(n) => n,
                        None => prefix_from_mask(!mask)?,
                    }
                }
            },
        };
        return Some((Addr::V4(a), prefix));
    }
    if v6 && let Some((a, scope)) = parse_v6(addr_text) {
        let prefix = match prefix_text {
            None => 128,
            Some(p) => parse_prefix_digits(p, 128)?,
        };
        return Some((Addr::V6(a, scope), prefix));
    }
    None
}

/// A network (`strict=True`): no host bits set.
pub(crate) fn parse_network(text: &str, v4: bool, v6: bool) -> Option<(Addr, u32)> {
    let (addr, prefix) = parse_with_prefix(text, v4, v6)?;
    if addr.value() & !addr.netmask(prefix) & addr.max() != 0 {
        return None;
    }
    Some((addr, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print_like_python() {
        for (text, shown) in [
            ("::1", Some("::1")),
            ("1:0:0:4:0:0:0:8", Some("1:0:0:4::8")),
            ("1:0:2:0:3:0:4:0", Some("1:0:2:0:3:0:4:0")),
            ("::ffff:1.2.3.4", Some("::ffff:102:304")),
            ("FE80::1%eth0", Some("fe80::1%eth0")),
            ("1:2:3:4:5:6:7::", Some("1:2:3:4:5:6:7:0")),
            ("::", Some("::")),
            ("1::2::3", None),
            ("12345::", None),
            ("1:2:3:4:5:6:7:8:9", None),
            ("1.2.3.4", Some("1.2.3.4")),
            ("01.2.3.4", None),
            ("256.1.1.1", None),
        ] {
            let parsed = parse_addr(text, true, true).map(|a| a.to_string());
            assert_eq!(parsed.as_deref(), shown, "{text}");
        }
        assert_eq!(parse_with_prefix("1.2.3.4/255.255.255.0", true, false).map(|p| p.1), Some(24));
        assert_eq!(parse_with_prefix("1.2.3.4/0.0.0.255", true, false).map(|p| p.1), Some(24));
        assert_eq!(parse_with_prefix("1.2.3.4/255.0.255.0", true, false), None);
        assert_eq!(parse_with_prefix("1.2.3.4/024", true, false).map(|p| p.1), Some(24));
        assert!(parse_network("10.0.0.1/8", true, true).is_none());
        assert!(parse_network("fd00::/8", true, true).is_some());
        assert!(parse_network("fd00::1/8", true, true).is_none());
    }
}
