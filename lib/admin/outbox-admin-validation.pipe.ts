import { Injectable, ValidationPipe } from '@nestjs/common';
import type { ValidationError } from 'class-validator';
import { IS_NOT_NULL } from './dto/admin-field.decorators';

/**
 * The admin routes' own validation, independent of any global pipe: unknown and `null` fields are
 * 400s naming the field, and a `null` field is reported once ("must not be null") rather than with
 * every constraint it also fails.
 */
@Injectable()
export class OutboxAdminValidationPipe extends ValidationPipe {
  constructor() {
    super({
      whitelist: true,
      forbidNonWhitelisted: true,
      forbidUnknownValues: true,
      transform: true,
      validationError: { target: false, value: false },
    });
  }

  protected override flattenValidationErrors(errors: ValidationError[]): string[] {
    return [...new Set(super.flattenValidationErrors(errors.map(onlyNullMessage)))];
  }
}

function onlyNullMessage(error: ValidationError): ValidationError {
  const nullMessage = error.constraints?.[IS_NOT_NULL];
  return {
    ...error,
    constraints: nullMessage ? { [IS_NOT_NULL]: nullMessage } : error.constraints,
    children: error.children?.map(onlyNullMessage),
  };
}
